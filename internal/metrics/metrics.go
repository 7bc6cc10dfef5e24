// Package metrics is agentd's Prometheus instrumentation: it implements the
// session engine's Observer and exposes the retry, backoff, credential,
// fallback, provider, prompt and event-stream metrics on an injected
// registry, and counts the round trips to Redis of the shared stores (a
// go-redis hook, RedisHook). Every label takes its values from a closed set
// (unknown values become "other"), and the series of the label
// combinations that can occur start at 0.
package metrics

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	agentprovider "github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

const namespace = "agentd"

// Other stands for a label value outside the closed set.
const Other = "other"

// Closed label sets.
var (
	// Classes are the retry classes.
	Classes = []string{string(retry.ClassTransient), string(retry.ClassUsageLimit), string(retry.ClassContextOverflow),
		string(retry.ClassStaleReplay), string(retry.ClassRefusal), string(retry.ClassNotRetryable)}
	// Sources are where a backoff delay came from.
	Sources = []string{string(retry.SourceEstimate), string(retry.SourceProvider), string(retry.SourceSibling),
		string(retry.SourceSwitch), string(retry.SourceStaleReplay)}
	// Outcomes are the prompt outcomes.
	Outcomes = []string{session.OutcomeCompleted, session.OutcomeFailed, session.OutcomeAborted}
	// Statuses are the HTTP statuses provider errors are counted by: 0 is a
	// failure before any response, 200 an error inside a stream.
	Statuses = []string{"0", "200", "400", "401", "402", "403", "404", "408", "409", "413", "429",
		"500", "502", "503", "504", "529", Other}
	// BlockReasons say where a credential block's length came from.
	BlockReasons = []string{"hint", "estimate", "paced"}
	// StoreOps are the credential-store operations.
	StoreOps = []string{"pick", "block", "redeem", "add", "delete", "list"}
	// TokenKinds are the kinds of token agentd_tokens_total counts.
	TokenKinds = []string{TokensInput, TokensOutput, TokensCacheRead, TokensCacheWrite, TokensReasoning}
	// RedisComponents are the parts of agentd a Redis round trip serves.
	RedisComponents = []string{ComponentCredentials, ComponentCooldowns, ComponentSessions, ComponentBudget, Other}

	// BackoffSources are, for each class a retry can start for (the classes
	// retry.Class.Retryable accepts: the only ones retry_attempts_total and
	// retry_backoff_seconds see), the delay sources retry.Plan can give it:
	// a stale replay retries at once; a refusal only on a fallback model (a
	// switch); a transient error sleeps the local backoff (an estimate) or
	// the provider's longer hint, or switches model; a usage limit also
	// waits for a sibling credential. The series start at 0 for these pairs
	// only (TestBackoffSourcesCoverPlan checks them against retry.Plan).
	BackoffSources = map[string][]string{
		string(retry.ClassTransient):   {string(retry.SourceEstimate), string(retry.SourceProvider), string(retry.SourceSwitch)},
		string(retry.ClassUsageLimit):  {string(retry.SourceEstimate), string(retry.SourceProvider), string(retry.SourceSibling), string(retry.SourceSwitch)},
		string(retry.ClassStaleReplay): {string(retry.SourceStaleReplay)},
		string(retry.ClassRefusal):     {string(retry.SourceSwitch)},
	}

	// StatusClasses are the retry classes a failed call's HTTP status gives
	// by itself (the status and code rules of retry.Classify): the
	// provider_errors_total series that start at 0. A pair the error's text
	// alone leads to (a 503 whose message names a quota, say) starts when
	// it first happens. An in-stream error (200) may be of any class.
	StatusClasses = map[string][]string{
		"0":   {string(retry.ClassTransient), string(retry.ClassNotRetryable)},
		"200": Classes,
		"400": {string(retry.ClassContextOverflow), string(retry.ClassStaleReplay), string(retry.ClassUsageLimit), string(retry.ClassTransient), string(retry.ClassNotRetryable)},
		"401": {string(retry.ClassNotRetryable)},
		"402": {string(retry.ClassUsageLimit)},
		"403": {string(retry.ClassUsageLimit), string(retry.ClassNotRetryable)},
		"404": {string(retry.ClassStaleReplay), string(retry.ClassNotRetryable)},
		"408": {string(retry.ClassTransient)},
		"409": {string(retry.ClassNotRetryable)},
		"413": {string(retry.ClassContextOverflow)},
		"429": {string(retry.ClassUsageLimit), string(retry.ClassTransient)},
		"500": {string(retry.ClassTransient)},
		"502": {string(retry.ClassTransient)},
		"503": {string(retry.ClassTransient)},
		"504": {string(retry.ClassTransient)},
		"529": {string(retry.ClassTransient)},
		Other: {string(retry.ClassTransient), string(retry.ClassNotRetryable)},
	}
)

// Token kinds (agentd_tokens_total's kind label).
const (
	TokensInput      = "input"
	TokensOutput     = "output"
	TokensCacheRead  = "cache_read"
	TokensCacheWrite = "cache_write"
	TokensReasoning  = "reasoning"
)

// Options give the closed label sets that depend on the configuration.
type Options struct {
	Providers []string // configured provider names
	Models    []string // provider/model references that may appear (configured models, chain entries)
	Roles     []string // fallback roles (chain keys; "default" is always there)
	Backends  []string // credential-store backends ("memory", "redis"); with "redis" the Redis round-trip series start at 0
	// Budget is retry.budget.max_tokens (0: no budget, no budget series).
	Budget float64

	// OpenProviders list no models: any model name is accepted, and its
	// retries are counted under model "other".
	OpenProviders []string
}

// Metrics holds every collector.
type Metrics struct {
	opts Options

	RetryAttempts      *prometheus.CounterVec
	RetryChainsEnded   *prometheus.CounterVec
	RetryBackoff       *prometheus.HistogramVec
	SessionsInBackoff  prometheus.Gauge
	CredentialBlocks   *prometheus.CounterVec
	CredentialSwitches *prometheus.CounterVec
	CredentialsBlocked *prometheus.GaugeVec
	Credentials        *prometheus.GaugeVec
	BankedRedeemed     *prometheus.CounterVec
	FallbacksApplied   *prometheus.CounterVec
	FallbacksSucceeded *prometheus.CounterVec
	FallbacksReverted  *prometheus.CounterVec
	ModelsInCooldown   prometheus.Gauge
	RetryBudgetTokens  *prometheus.GaugeVec
	ModelProbes        *prometheus.CounterVec
	RateLimitsAvoided  *prometheus.CounterVec
	RetryBudgetRefused *prometheus.CounterVec
	ProviderDuration   *prometheus.HistogramVec
	ProviderTTFT       *prometheus.HistogramVec
	ProviderErrors     *prometheus.CounterVec
	Prompts            *prometheus.CounterVec
	PromptDuration     *prometheus.HistogramVec
	EventsDropped      prometheus.Counter
	StoreOperations    *prometheus.CounterVec
	StoreErrors        *prometheus.CounterVec
	StoreDegraded      prometheus.Gauge
	StoreWritable      prometheus.Gauge
	StoreReplicasShort prometheus.Gauge
	Takeovers          *prometheus.CounterVec
	RedisRoundTrips    *prometheus.CounterVec
	RedisRoundTripTime *prometheus.HistogramVec
	RedisErrors        *prometheus.CounterVec
	Tokens             *prometheus.CounterVec
	Cost               *prometheus.CounterVec
	RetryWastedTokens  *prometheus.CounterVec

	// usage holds the usage series of each (provider, model), resolved
	// once: a model call counts its tokens without a label lookup. The
	// pairs that can occur start at 0 (initialize); another one (a model of
	// another provider's chain, say) starts when it first happens.
	usage sync.Map // [2]string → *usageSeries
}

// usageOf is the usage series of provider p's model mod.
func (m *Metrics) usageOf(p, mod string) *usageSeries {
	k := [2]string{p, mod}
	if us, ok := m.usage.Load(k); ok {
		return us.(*usageSeries)
	}
	us := &usageSeries{cost: m.Cost.WithLabelValues(p, mod), wasted: m.RetryWastedTokens.WithLabelValues(p, mod)}
	for i, kind := range TokenKinds {
		us.tokens[i] = m.Tokens.WithLabelValues(p, mod, kind)
	}
	got, _ := m.usage.LoadOrStore(k, us)
	return got.(*usageSeries)
}

// usageSeries are one (provider, model)'s usage counters.
type usageSeries struct {
	tokens [5]prometheus.Counter // in TokenKinds order
	cost   prometheus.Counter
	wasted prometheus.Counter
}

var (
	_ session.Observer          = (*Metrics)(nil)
	_ session.RateLimitObserver = (*Metrics)(nil)
)

// New registers every agentd metric on reg.
func New(reg prometheus.Registerer, opts Options) *Metrics {
	if !slices.Contains(opts.Roles, "default") {
		opts.Roles = append(opts.Roles, "default")
	}
	f := promauto.With(reg)
	backoffBuckets := []float64{0, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 900, 3600}
	latency := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m := &Metrics{
		opts: opts,
		RetryAttempts: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "retry_attempts_total",
			Help: "Retries started (auto_retry_start), by provider, model and error class."}, []string{"provider", "model", "class"}),
		RetryChainsEnded: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "retry_chains_ended_total",
			Help: "Retry chains that ended, by outcome."}, []string{"outcome"}),
		RetryBackoff: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "retry_backoff_seconds",
			Help:    "Backoff actually slept before a retry (cut short when cancelled), by error class and where the delay came from.",
			Buckets: backoffBuckets}, []string{"class", "source"}),
		SessionsInBackoff: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "sessions_in_backoff",
			Help: "Sessions sleeping in a retry backoff now."}),
		CredentialBlocks: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "credential_blocks_total",
			Help: "Credentials blocked for a usage limit, by provider and where the block's length came from."}, []string{"provider", "reason"}),
		CredentialSwitches: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "credential_switches_total",
			Help: "Switches to a sibling credential after a usage limit, by provider."}, []string{"provider", "reason"}),
		CredentialsBlocked: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "credentials_blocked",
			Help: "Credentials blocked now, by provider."}, []string{"provider"}),
		Credentials: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "credentials",
			Help: "Credentials known, by provider."}, []string{"provider"}),
		BankedRedeemed: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "banked_resets_redeemed_total",
			Help: "Banked resets spent to unblock a credential, by provider."}, []string{"provider"}),
		FallbacksApplied: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "model_fallbacks_applied_total",
			Help: "Switches to a fallback model, by role."}, []string{"role"}),
		FallbacksSucceeded: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "model_fallbacks_succeeded_total",
			Help: "First successes on a fallback model, by role."}, []string{"role"}),
		FallbacksReverted: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "model_fallbacks_reverted_total",
			Help: "Returns to the primary model after its cooldown, by role."}, []string{"role"}),
		ModelsInCooldown: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "models_in_cooldown",
			Help: "Models cooling down now (skipped as fallback candidates)."}),
		RateLimitsAvoided: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "rate_limits_avoided_total",
			Help: "429s avoided by pacing: calls that, after a successful response showed their session's credential at 0 remaining in a rate-limit bucket (and it was blocked until the reset), went to a sibling or waited instead, by provider."},
			[]string{"provider"}),
		ModelProbes: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "model_probes_total",
			Help: "Probe calls to a model whose cooldown ended (one at a time across the replicas), by outcome: success (the circuit closes), failure (a longer cooldown), released (the probe proved nothing: cancelled, a non-retryable error, never made)."},
			[]string{"outcome"}),
		RetryBudgetTokens: f.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "retry_budget_tokens",
			Help: "Tokens left in the retry budget (retry.budget) of a model, shared by every replica with the Redis store; a retry needs more than half of max_tokens."},
			[]string{"provider", "model"}),
		RetryBudgetRefused: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "retry_budget_refusals_total",
			Help: "Retries the retry budget refused (each ended its chain with \"retry budget exhausted\"), by provider and model."},
			[]string{"provider", "model"}),
		ProviderDuration: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "provider_request_duration_seconds",
			Help: "Duration of model calls, from request to the end of the stream, by provider.", Buckets: latency}, []string{"provider"}),
		ProviderTTFT: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "provider_time_to_first_token_seconds",
			Help: "Time from request to the first streamed output, by provider.", Buckets: latency}, []string{"provider"}),
		ProviderErrors: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "provider_errors_total",
			Help: "Model calls that ended in an error, by provider, HTTP status (0: no response, 200: in-stream) and retry class."},
			[]string{"provider", "status", "class"}),
		Prompts: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "prompts_total",
			Help: "Prompts that ended, by outcome."}, []string{"outcome"}),
		PromptDuration: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "prompt_duration_seconds",
			Help: "Duration of prompts, retries and tool waits included, by outcome.", Buckets: latency}, []string{"outcome"}),
		EventsDropped: f.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "events_dropped_total",
			Help: "Event readers cut off for falling behind the session's event buffer."}),
		StoreOperations: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "credstore_operations_total",
			Help: "Credential-store operations, by backend and operation."}, []string{"backend", "op"}),
		StoreErrors: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "credstore_errors_total",
			Help: "Credential-store operations that failed, by backend and operation."}, []string{"backend", "op"}),
		StoreDegraded: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "store_degraded",
			Help: "1 while the shared store (Redis) is unreachable and agentd runs on its local view."}),
		StoreWritable: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "store_writable",
			Help: "1 when the store's last write probe (at start and behind /readyz, at most one a second) succeeded on every master, 0 when it failed; always 1 with the memory store."}),
		StoreReplicasShort: f.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "store_replicas_short",
			Help: "1 when the store's last write probe was acknowledged by fewer replicas than store.redis.min_replica_acks asks on some master (new sessions and prompts of its slots are refused meanwhile), 0 otherwise; always 0 without min_replica_acks."}),
		Takeovers: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "session_takeovers_total",
			Help: "Running prompts that changed replica, by outcome: resumed (a lost replica's retry resumed here), ended (a lost replica's prompt ended here), handed_over (a retry in backoff handed to the others at shutdown), lease_lost (a prompt stopped here when its lease was lost)."},
			[]string{"outcome"}),
		RedisRoundTrips: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "redis_round_trips_total",
			Help: "Round trips to Redis (a command, a script run, or a whole pipeline), by the component whose key they touch."},
			[]string{"component"}),
		RedisRoundTripTime: f.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "redis_round_trip_seconds",
			Help:    "Duration of round trips to Redis, by the component whose key they touch.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5}}, []string{"component"}),
		RedisErrors: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "redis_errors_total",
			Help: "Round trips to Redis that failed (neither a nil reply nor an error go-redis recovers from, such as NOSCRIPT), by the component whose key they touch."},
			[]string{"component"}),
		Tokens: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "tokens_total",
			Help: "Tokens model calls used, failed attempts included, by provider, model and kind: input (neither read from nor written to the prompt cache), output (reasoning included), cache_read, cache_write, reasoning (the reasoning part of output)."},
			[]string{"provider", "model", "kind"}),
		Cost: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "cost_usd_total",
			Help: "Cost in USD of the model calls whose model the catalog prices, failed attempts included, by provider and model."},
			[]string{"provider", "model"}),
		RetryWastedTokens: f.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "retry_wasted_tokens_total",
			Help: "Tokens (every kind but reasoning, which is part of output) used by failed calls that a retry or fallback threw away, by provider and model."},
			[]string{"provider", "model"}),
	}
	m.initialize()
	return m
}

// initialize creates at 0 the series of the closed label sets that can
// occur: a model only with its own provider, "other" only where a value
// outside the configured sets can come (a provider that lists no models,
// an HTTP status outside Statuses), a class and delay source only as
// retry.Plan pairs them (BackoffSources), a status with the classes it
// gives (StatusClasses), takeovers only with sessions in Redis. A series
// outside those starts when it first happens.
func (m *Metrics) initialize() {
	for _, p := range m.opts.Providers {
		models := m.modelsOf(p)
		for _, mod := range models {
			for c := range BackoffSources {
				m.RetryAttempts.WithLabelValues(p, mod, c)
			}
			if m.opts.Budget > 0 && mod != Other && strings.HasPrefix(mod, p+"/") {
				m.RetryBudgetTokens.WithLabelValues(p, mod).Set(m.opts.Budget)
				m.RetryBudgetRefused.WithLabelValues(p, mod)
			}
			m.usageOf(p, mod)
		}
		for _, r := range BlockReasons {
			m.CredentialBlocks.WithLabelValues(p, r)
			m.CredentialSwitches.WithLabelValues(p, r)
		}
		m.CredentialsBlocked.WithLabelValues(p)
		m.Credentials.WithLabelValues(p)
		m.BankedRedeemed.WithLabelValues(p)
		m.RateLimitsAvoided.WithLabelValues(p)
		m.ProviderDuration.WithLabelValues(p)
		m.ProviderTTFT.WithLabelValues(p)
		for st, classes := range StatusClasses {
			for _, c := range classes {
				m.ProviderErrors.WithLabelValues(p, st, c)
			}
		}
	}
	if slices.Contains(m.opts.Backends, "redis") {
		// Takeovers happen between replicas sharing sessions in Redis.
		for _, o := range session.TakeoverOutcomes {
			m.Takeovers.WithLabelValues(o)
		}
	}
	for _, o := range ProbeOutcomes {
		m.ModelProbes.WithLabelValues(o)
	}
	for _, o := range session.ChainOutcomes {
		m.RetryChainsEnded.WithLabelValues(string(o))
	}
	for c, sources := range BackoffSources {
		for _, s := range sources {
			m.RetryBackoff.WithLabelValues(c, s)
		}
	}
	for _, r := range m.opts.Roles {
		m.FallbacksApplied.WithLabelValues(r)
		m.FallbacksSucceeded.WithLabelValues(r)
		m.FallbacksReverted.WithLabelValues(r)
	}
	for _, o := range Outcomes {
		m.Prompts.WithLabelValues(o)
		m.PromptDuration.WithLabelValues(o)
	}
	for _, b := range m.opts.Backends {
		for _, op := range StoreOps {
			m.StoreOperations.WithLabelValues(b, op)
			m.StoreErrors.WithLabelValues(b, op)
		}
	}
	if slices.Contains(m.opts.Backends, "redis") {
		for _, c := range RedisComponents {
			m.RedisRoundTrips.WithLabelValues(c)
			m.RedisRoundTripTime.WithLabelValues(c)
			m.RedisErrors.WithLabelValues(c)
		}
	}
}

// modelsOf is the model label values provider p's calls can carry: its
// models ("p/…"), and "other" when it lists none.
func (m *Metrics) modelsOf(p string) []string {
	var out []string
	for _, mod := range m.opts.Models {
		if strings.HasPrefix(mod, p+"/") {
			out = append(out, mod)
		}
	}
	if slices.Contains(m.opts.OpenProviders, p) {
		out = append(out, Other)
	}
	return out
}

func closed(v string, set []string) string {
	if slices.Contains(set, v) {
		return v
	}
	return Other
}

func (m *Metrics) provider(p string) string { return closed(p, m.opts.Providers) }
func (m *Metrics) model(v string) string    { return closed(v, m.opts.Models) }
func (m *Metrics) role(r string) string     { return closed(r, m.opts.Roles) }

func status(code int) string { return closed(strconv.Itoa(code), Statuses) }

// PromptEnded implements session.Observer.
func (m *Metrics) PromptEnded(outcome string, d time.Duration) {
	outcome = closed(outcome, Outcomes)
	m.Prompts.WithLabelValues(outcome).Inc()
	m.PromptDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

// ModelCalled implements session.Observer.
func (m *Metrics) ModelCalled(c session.Call) {
	p := m.provider(c.Provider)
	m.ProviderDuration.WithLabelValues(p).Observe(c.Duration.Seconds())
	if c.TTFT > 0 {
		m.ProviderTTFT.WithLabelValues(p).Observe(c.TTFT.Seconds())
	}
	if c.StopReason == "error" {
		m.ProviderErrors.WithLabelValues(p, status(c.Status), closed(c.Class, Classes)).Inc()
	}
	if c.Usage.IsZero() && c.CostUSD == nil {
		return
	}
	us := m.usageOf(p, m.model(c.Model))
	u := c.Usage
	for i, n := range [5]int64{u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.ReasoningTokens} {
		if n > 0 {
			us.tokens[i].Add(float64(n))
		}
	}
	if c.CostUSD != nil && *c.CostUSD > 0 {
		us.cost.Add(*c.CostUSD)
	}
}

// RetryWasted implements session.Observer.
func (m *Metrics) RetryWasted(provider, model string, u agentprovider.Usage) {
	if n := u.Total(); n > 0 {
		m.usageOf(m.provider(provider), m.model(model)).wasted.Add(float64(n))
	}
}

// RetryScheduled implements session.Observer.
func (m *Metrics) RetryScheduled(r session.Retry) {
	m.RetryAttempts.WithLabelValues(m.provider(r.Provider), m.model(r.Model), closed(r.Class, Classes)).Inc()
}

// BackoffSlept implements session.Observer.
func (m *Metrics) BackoffSlept(class, source string, d time.Duration) {
	m.RetryBackoff.WithLabelValues(closed(class, Classes), closed(source, Sources)).Observe(d.Seconds())
}

// InBackoff implements session.Observer.
func (m *Metrics) InBackoff(delta int) { m.SessionsInBackoff.Add(float64(delta)) }

// Takeover implements session.Observer.
func (m *Metrics) Takeover(outcome string) {
	m.Takeovers.WithLabelValues(closed(outcome, session.TakeoverOutcomes)).Inc()
}

// ChainEnded implements session.Observer.
func (m *Metrics) ChainEnded(outcome session.ChainOutcome) {
	// The outcomes are a closed set already: the label is the outcome.
	m.RetryChainsEnded.WithLabelValues(string(outcome)).Inc()
}

// CredentialSwitched implements session.Observer.
func (m *Metrics) CredentialSwitched(provider, reason string) {
	m.CredentialSwitches.WithLabelValues(m.provider(provider), closed(reason, BlockReasons)).Inc()
}

// FallbackApplied implements session.Observer.
func (m *Metrics) FallbackApplied(role string) {
	m.FallbacksApplied.WithLabelValues(m.role(role)).Inc()
}

// FallbackSucceeded implements session.Observer.
func (m *Metrics) FallbackSucceeded(role string) {
	m.FallbacksSucceeded.WithLabelValues(m.role(role)).Inc()
}

// FallbackReverted implements session.Observer.
func (m *Metrics) FallbackReverted(role string) {
	m.FallbacksReverted.WithLabelValues(m.role(role)).Inc()
}

// SubscriberDropped implements session.Observer.
func (m *Metrics) SubscriberDropped() { m.EventsDropped.Inc() }

// RateLimitAvoided implements session.RateLimitObserver.
func (m *Metrics) RateLimitAvoided(provider string) {
	m.RateLimitsAvoided.WithLabelValues(m.provider(provider)).Inc()
}

// ProbeOutcomes are the outcomes of a model's probe.
var ProbeOutcomes = []string{session.ProbeSuccess, session.ProbeFailure, session.ProbeReleased}

// ProbeSettled counts a settled probe.
func (m *Metrics) ProbeSettled(outcome string) {
	m.ModelProbes.WithLabelValues(closed(outcome, ProbeOutcomes)).Inc()
}

// RetryBudget reports a retry budget decision on model (provider/model):
// the tokens left after it, and whether it refused the retry.
func (m *Metrics) RetryBudget(provider, model string, tokens float64, refused bool) {
	p, mod := m.provider(provider), m.model(model)
	if mod != Other {
		m.RetryBudgetTokens.WithLabelValues(p, mod).Set(tokens)
	}
	if refused {
		m.RetryBudgetRefused.WithLabelValues(p, mod).Inc()
	}
}

// RetryBudgetLevels sets every model's budget gauge from the budgets not
// full (levels, by provider/model); the others are full (max tokens).
func (m *Metrics) RetryBudgetLevels(levels map[string]float64) {
	if m.opts.Budget <= 0 {
		return
	}
	for _, mod := range m.opts.Models {
		p, _, _ := strings.Cut(mod, "/")
		v, ok := levels[mod]
		if !ok {
			v = m.opts.Budget
		}
		m.RetryBudgetTokens.WithLabelValues(m.provider(p), mod).Set(v)
	}
}

// CredentialBlocked counts a usage-limit block.
func (m *Metrics) CredentialBlocked(provider, reason string) {
	m.CredentialBlocks.WithLabelValues(m.provider(provider), closed(reason, BlockReasons)).Inc()
}

// BankedResetRedeemed counts a banked reset spent.
func (m *Metrics) BankedResetRedeemed(provider string) {
	m.BankedRedeemed.WithLabelValues(m.provider(provider)).Inc()
}

// StoreOp counts a credential-store operation and, when err is set, its failure.
func (m *Metrics) StoreOp(backend, op string, err error) {
	op = closed(op, StoreOps)
	m.StoreOperations.WithLabelValues(backend, op).Inc()
	if err != nil {
		m.StoreErrors.WithLabelValues(backend, op).Inc()
	}
}

// StoreSeries is one credential-store operation's two series, resolved
// once by a caller that counts the operation on every prompt (the pick
// before each model call): WithLabelValues hashes and checks its labels
// on every call.
type StoreSeries struct{ ops, errs prometheus.Counter }

// StoreSeries returns the series of op on backend.
func (m *Metrics) StoreSeries(backend, op string) StoreSeries {
	op = closed(op, StoreOps)
	return StoreSeries{ops: m.StoreOperations.WithLabelValues(backend, op), errs: m.StoreErrors.WithLabelValues(backend, op)}
}

// Count counts one operation and, when err is set, its failure.
func (s StoreSeries) Count(err error) {
	s.ops.Inc()
	if err != nil {
		s.errs.Inc()
	}
}
