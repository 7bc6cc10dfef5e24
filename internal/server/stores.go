package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/retrybudget"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/sessionstore"
)

// openStores builds the credential store the configuration asks for and
// adds the configured credentials to it.
func (s *Server) openStores(ctx context.Context) error {
	cfg := s.cfg
	switch cfg.Store.Backend {
	case "redis":
		r := cfg.Store.Redis
		// One client for the three stores, built for the configured
		// topology (single server, Cluster, Sentinel).
		o := redisconn.FromConfig(r)
		o.Logger = s.log
		conn, err := redisconn.New(o)
		if err != nil {
			return fmt.Errorf("store.redis: %w", err)
		}
		s.rconn, s.redis = conn, conn.Client()
		timeout := conn.Timeout()
		// Every round trip of the three stores, by component.
		s.redis.AddHook(s.metrics.RedisHook(r.KeyPrefix))
		st, err := credstore.NewRedis(s.redis, credstore.RedisOptions{
			KeyPrefix:    r.KeyPrefix,
			Timeout:      timeout,
			SyncInterval: time.Duration(r.SyncIntervalMs) * time.Millisecond,
			SecretKey:    []byte(r.SecretKey),
			Logger:       s.log,
		})
		if err != nil {
			s.rconn.Close()
			return fmt.Errorf("store.redis: %w", err)
		}
		s.creds = st
		s.cooldowns = cooldown.NewRedis(s.redis, r.KeyPrefix, s.now)
		if b, _ := cfg.RetryBudget(); b.Enabled() {
			rb := retrybudget.NewRedis(s.redis, b, retrybudget.RedisOptions{KeyPrefix: r.KeyPrefix, Logger: s.log})
			s.budget, s.budgetClose = rb, rb.Close
		}
		shared, err := sessionstore.NewRedis(s.redis, sessionstore.Options{
			KeyPrefix:   r.KeyPrefix,
			EventBuffer: cfg.Sessions.EventBuffer,
			Timeout:     timeout,
			Logger:      s.log,
			// Session creation and a prompt's end wait for the replicas.
			MinReplicaAcks: r.MinReplicaAcks,
		})
		if err != nil {
			st.Close()
			s.rconn.Close()
			return fmt.Errorf("store.redis: sessions: %w", err)
		}
		s.sharedStore = shared
		s.shared = startPicker{Redis: shared, creds: st, metrics: s.metrics}
	default:
		s.creds = credstore.NewMemory(credstore.MemoryOptions{Now: s.now})
		s.cooldowns = cooldown.NewMemory(s.now)
		if b, _ := cfg.RetryBudget(); b.Enabled() {
			s.budget = retrybudget.NewMemory(b)
		}
	}
	s.checkStoreAtStart(ctx) // readiness.go
	for _, pc := range cfg.Providers {
		for _, c := range pc.Credentials {
			if _, err := s.creds.Add(ctx, credstore.Credential{ID: c.ID, Provider: pc.Name, Secret: c.APIKey,
				Source: credstore.SourceConfig, BankedResets: c.BankedResets, AutoRedeem: c.AutoRedeem || pc.AutoRedeem,
				Account: c.Account}); err != nil {
				return fmt.Errorf("providers %s: credential %s: %w", pc.Name, c.ID, err)
			}
		}
	}
	return nil
}

// cooldownRegistry is the model cooldown registry: in memory, or shared
// through Redis.
type cooldownRegistry interface {
	session.Cooldowns
	Active(ctx context.Context) (map[string]time.Time, error)
	Admit(ctx context.Context, model string) (cooldown.Admission, error)
	Settle(ctx context.Context, model, token, outcome string, cooldown time.Duration) error
}

// probingCooldowns gives the session engine the cooldown registry with its
// half-open probes, and counts the probes' outcomes.
type probingCooldowns struct {
	cooldownRegistry
	metrics *metrics.Metrics
}

var _ session.Prober = probingCooldowns{}

func (p probingCooldowns) Admit(ctx context.Context, model string) (session.Admission, error) {
	a, err := p.cooldownRegistry.Admit(ctx, model)
	return session.Admission{Allowed: a.Allowed, Probe: a.Probe, Token: a.Token}, err
}

func (p probingCooldowns) Settle(ctx context.Context, model, token, outcome string, d time.Duration) error {
	p.metrics.ProbeSettled(outcome)
	return p.cooldownRegistry.Settle(ctx, model, token, outcome, d)
}

// retryBudget is the retry budget (retry.budget): in memory, or shared
// through Redis.
type retryBudget interface {
	Retry(ctx context.Context, model string) (retrybudget.Decision, error)
	Succeeded(model string)
	Levels(ctx context.Context) (map[string]float64, error)
}

// budgetAdapter gives the session engine the retry budget, and reports
// its decisions to the metrics and the log.
type budgetAdapter struct {
	budget  retryBudget
	metrics *metrics.Metrics
	log     *slog.Logger
}

func (a budgetAdapter) Retry(ctx context.Context, model string) bool {
	d, err := a.budget.Retry(ctx, model)
	if err != nil {
		a.log.Warn("retry budget: Redis unavailable, decided on the local copy", "model", model, "err", err)
	}
	p, _, _ := strings.Cut(model, "/")
	a.metrics.RetryBudget(p, model, d.Tokens, !d.Allowed)
	return d.Allowed
}

func (a budgetAdapter) Succeeded(model string) { a.budget.Succeeded(model) }

// closeStores stops the stores' background work and closes the Redis client.
func (s *Server) closeStores() error {
	var err error
	if s.budgetClose != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if cerr := s.budgetClose(ctx); cerr != nil {
			s.log.Warn("retry budget: successes not sent at close", "err", cerr)
		}
		cancel()
	}
	if s.sharedStore != nil {
		err = s.sharedStore.Close()
	}
	if s.creds != nil {
		if cerr := s.creds.Close(); err == nil {
			err = cerr
		}
	}
	if s.rconn != nil {
		if cerr := s.rconn.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// credentialAdapter gives the session engine the credential store, and
// counts what it does. A session of tenant T calls with a credential of
// T's pool (see package credstore): T's own credentials of the provider
// first, round-robin among the available ones, then the server's (those
// that serve every tenant), used when all of T's own are blocked or T has
// none; a usage limit switches to an available sibling of that same pool.
// No other tenant's credential is ever in T's pool.
type credentialAdapter struct {
	store   credstore.Store
	backend string
	metrics *metrics.Metrics
}

func (a credentialAdapter) Pick(ctx context.Context, tenant, providerName, prefer string) (c provider.Credential, ok bool, err error) {
	c, ok, err = a.store.PickPreferred(ctx, tenant, providerName, prefer)
	a.metrics.StoreOp(a.backend, "pick", ignoreAllBlocked(err))
	return c, ok, err
}

func (a credentialAdapter) UsageLimited(ctx context.Context, tenant, providerName, credID string, window time.Duration, fromProvider bool, reason string) (session.CredentialSwitch, error) {
	sw, err := a.store.UsageLimited(ctx, tenant, providerName, credID, window, fromProvider, reason)
	a.metrics.StoreOp(a.backend, "block", err)
	if err == nil {
		a.metrics.CredentialBlocked(providerName, string(retry.BasisOf(fromProvider)))
		if sw.Redeemed {
			a.metrics.BankedResetRedeemed(providerName)
		}
	}
	return session.CredentialSwitch{Switched: sw.Switched, To: sw.To, SiblingFreeIn: sw.SiblingFreeIn, HasSibling: sw.HasSibling}, err
}

var _ session.Pacer = credentialAdapter{}

// Paced blocks a credential whose rate limit is at 0 remaining until its
// reset (reason paced): the calls that follow go to a sibling or wait,
// instead of meeting a 429.
func (a credentialAdapter) Paced(ctx context.Context, tenant, providerName, credID string, wait time.Duration, reason string) error {
	_, err := a.store.UsageLimited(ctx, tenant, providerName, credID, wait, true, reason)
	a.metrics.StoreOp(a.backend, "block", err)
	if err == nil {
		a.metrics.CredentialBlocked(providerName, "paced")
	}
	return err
}

// ignoreAllBlocked: every credential being blocked is an answer, not a
// store failure.
func ignoreAllBlocked(err error) error {
	if errors.Is(err, credstore.ErrAllBlocked) {
		return nil
	}
	return err
}

// refreshGauges sets the gauges read from the stores; it runs before each
// scrape.
func (s *Server) refreshGauges(ctx context.Context) {
	infos, err := s.creds.List(ctx, credstore.Filter{All: true})
	if err == nil {
		total := map[string]int{}
		blocked := map[string]int{}
		for _, i := range infos {
			total[i.Provider]++
			if i.Status == credstore.StatusBlocked {
				blocked[i.Provider]++
			}
		}
		for _, p := range s.metricProviders {
			s.metrics.Credentials.WithLabelValues(p).Set(float64(total[p]))
			s.metrics.CredentialsBlocked.WithLabelValues(p).Set(float64(blocked[p]))
		}
	}
	if active, err := s.cooldowns.Active(ctx); err == nil {
		s.metrics.ModelsInCooldown.Set(float64(len(active)))
	}
	if s.budget != nil {
		if levels, err := s.budget.Levels(ctx); err == nil {
			s.metrics.RetryBudgetLevels(levels)
		}
	}
	degraded := 0.0
	if s.creds.Degraded() {
		degraded = 1
	}
	s.metrics.StoreDegraded.Set(degraded)
}

// metricsHandler refreshes the store gauges, then serves the registry.
func (s *Server) metricsHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		s.refreshGauges(ctx)
		cancel()
		next.ServeHTTP(w, r)
	})
}

// startPicker is the Redis session store whose prompt start carries the
// prompt's first credential pick (the credential store's script, on the same
// client) in the start's pipeline: one round trip before the model call.
type startPicker struct {
	*sessionstore.Redis
	creds   *credstore.Redis
	metrics *metrics.Metrics
}

var _ session.StartPicker = startPicker{}

// StartPick implements session.StartPicker.
func (p startPicker) StartPick(ctx context.Context, id string, ttl time.Duration, r session.Run, first *session.Entry, slot session.PromptSlot, max int, pick session.CredentialPick) (session.StartResult, session.Picked, error) {
	var result func() (provider.Credential, bool, error)
	res, err := p.StartAlso(ctx, id, ttl, r, first, slot, max, func(ctx context.Context, pipe redis.Pipeliner) {
		result, _ = p.creds.QueuePick(ctx, pipe, pick.Tenant, pick.Provider, pick.Prefer)
	})
	if err != nil || !res.Started || result == nil {
		return res, session.Picked{}, err
	}
	c, ok, perr := result()
	if perr != nil || !ok {
		// The call picks again (and reports what the store says).
		return res, session.Picked{}, nil
	}
	p.metrics.StoreOp("redis", "pick", nil)
	return res, session.Picked{Credential: c, OK: true}, nil
}
