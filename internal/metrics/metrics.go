// Package metrics is agentd's Prometheus instrumentation: it implements the
// session engine's Observer and exposes the retry, backoff, credential,
// fallback, provider, prompt and event-stream metrics on an injected
// registry, and counts the round trips to Redis of the shared stores (a
// go-redis hook, RedisHook). Every label takes its values from a closed set
// (unknown values become "other") and every series starts at 0.
package metrics

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/agentd/agentd/internal/config"
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
	// RedisComponents are the parts of agentd a Redis round trip serves.
	RedisComponents = []string{ComponentCredentials, ComponentCooldowns, ComponentSessions, ComponentBudget, Other}
)

// Options give the closed label sets that depend on the configuration.
type Options struct {
	Providers []string // configured provider names
	Models    []string // provider/model references that may appear (configured models, chain entries)
	Roles     []string // fallback roles (chain keys; "default" is always there)
	Backends  []string // credential-store backends ("memory", "redis"); with "redis" the Redis round-trip series start at 0
	// Budget is retry.budget.max_tokens (0: no budget, no budget series).
	Budget float64
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
	Takeovers          *prometheus.CounterVec
	RedisRoundTrips    *prometheus.CounterVec
	RedisRoundTripTime *prometheus.HistogramVec
	RedisErrors        *prometheus.CounterVec
}

var _ session.Observer = (*Metrics)(nil)

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
			Help: "Credentials blocked before a 429 (pacing): a successful response showed a rate-limit bucket at 0 remaining, so the calls that follow go to a sibling or wait until its reset, by provider."},
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
	}
	m.initialize()
	return m
}

// initialize creates every series of the closed label sets at 0.
func (m *Metrics) initialize() {
	providers := append(slices.Clone(m.opts.Providers), Other)
	models := append(slices.Clone(m.opts.Models), Other)
	for _, p := range providers {
		for _, mod := range models {
			for _, c := range Classes {
				m.RetryAttempts.WithLabelValues(p, mod, c)
			}
			if m.opts.Budget > 0 && mod != Other && strings.HasPrefix(mod, p+"/") {
				m.RetryBudgetTokens.WithLabelValues(p, mod).Set(m.opts.Budget)
				m.RetryBudgetRefused.WithLabelValues(p, mod)
			}
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
		for _, st := range Statuses {
			for _, c := range Classes {
				m.ProviderErrors.WithLabelValues(p, st, c)
			}
		}
	}
	for _, o := range session.TakeoverOutcomes {
		m.Takeovers.WithLabelValues(o)
	}
	for _, o := range ProbeOutcomes {
		m.ModelProbes.WithLabelValues(o)
	}
	for _, o := range session.ChainOutcomes {
		m.RetryChainsEnded.WithLabelValues(o)
	}
	for _, c := range Classes {
		for _, s := range Sources {
			m.RetryBackoff.WithLabelValues(c, s)
		}
	}
	for _, r := range append(slices.Clone(m.opts.Roles), Other) {
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
func (m *Metrics) ChainEnded(outcome string) {
	m.RetryChainsEnded.WithLabelValues(closed(outcome, session.ChainOutcomes)).Inc()
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

// RateLimitAvoided counts a pacing block.
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

// OptionsFor derives the closed label sets from a configuration: its
// providers, their models and the fallback chains' models and roles.
func OptionsFor(cfg *config.Config) Options {
	var o Options
	for _, p := range cfg.Providers {
		o.Providers = append(o.Providers, p.Name)
		for _, m := range p.ModelNames() {
			o.Models = append(o.Models, p.Name+"/"+m)
		}
	}
	for role, chain := range cfg.Retry.FallbackChains {
		o.Roles = append(o.Roles, role)
		for _, m := range chain {
			if !slices.Contains(o.Models, m) {
				o.Models = append(o.Models, m)
			}
		}
	}
	slices.Sort(o.Roles)
	o.Backends = []string{cfg.Store.Backend}
	if b, err := cfg.RetryBudget(); err == nil && b.Enabled() {
		o.Budget = float64(b.MaxTokens)
	}
	return o
}
