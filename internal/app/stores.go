package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/config"
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

// stores are the credential store, the model cooldown registry, the retry
// budget and, with the Redis backend, the client and the shared session
// store, with what closes them.
type stores struct {
	creds       credstore.Store
	cooldowns   cooldownRegistry
	budget      retryBudget // nil: no retry.budget
	rconn       *redisconn.Conn
	sharedStore *sessionstore.Redis
	shared      session.Shared // sessions shared by the replicas (Redis); nil in memory

	// closers close what was opened, in the order it was opened.
	closers []func() error
}

// openStores builds the stores the configuration asks for. On an error it
// closes whatever it had opened.
func openStores(cfg *config.Config, log *slog.Logger, m *metrics.Metrics, now func() time.Time) (_ *stores, err error) {
	st := &stores{}
	defer func() {
		if err != nil {
			_ = st.close()
		}
	}()
	switch cfg.Store.Backend {
	case "redis":
		r := cfg.Store.Redis
		// One client for the three stores, built for the configured
		// topology (single server, Cluster, Sentinel).
		o := redisconn.FromConfig(r)
		o.Logger = log
		conn, err := redisconn.New(o)
		if err != nil {
			return nil, fmt.Errorf("store.redis: %w", err)
		}
		st.rconn = conn
		st.closers = append(st.closers, conn.Close)
		client := conn.Client()
		timeout := conn.Timeout()
		// Every round trip of the three stores, by component.
		prefix := r.KeyPrefix
		client.AddHook(m.RedisHook(metrics.KeyOwners{
			Credentials: func(k string) bool { return credstore.OwnsKey(prefix, k) },
			Cooldowns:   func(k string) bool { return cooldown.OwnsKey(prefix, k) },
			Sessions:    func(k string) bool { return sessionstore.OwnsKey(prefix, k) },
			Budget:      func(k string) bool { return retrybudget.OwnsKey(prefix, k) },
		}))
		creds, err := credstore.NewRedis(client, credstore.RedisOptions{
			KeyPrefix:    r.KeyPrefix,
			Timeout:      timeout,
			SyncInterval: r.SyncIntervalMs.Duration(),
			SecretKey:    []byte(r.SecretKey),
			Logger:       log,
			MaxPerOwner:  cfg.Limits.MaxCredentialsPerTenant,
		})
		if err != nil {
			return nil, fmt.Errorf("store.redis: %w", err)
		}
		st.creds = creds
		st.closers = append(st.closers, creds.Close)
		st.cooldowns = cooldown.NewRedis(client, r.KeyPrefix, now)
		if b, _ := cfg.RetryBudget(); b.Enabled() {
			rb := retrybudget.NewRedis(client, b, retrybudget.RedisOptions{KeyPrefix: r.KeyPrefix, Logger: log})
			st.budget = rb
			st.closers = append(st.closers, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if err := rb.Close(ctx); err != nil {
					log.Warn("retry budget: successes not sent at close", "err", err)
				}
				return nil
			})
		}
		shared, err := sessionstore.NewRedis(client, sessionstore.Options{
			KeyPrefix:   r.KeyPrefix,
			EventBuffer: cfg.Sessions.EventBuffer,
			Timeout:     timeout,
			Logger:      log,
			// Session creation and a prompt's end wait for the replicas.
			MinReplicaAcks: r.MinReplicaAcks,
		})
		if err != nil {
			return nil, fmt.Errorf("store.redis: sessions: %w", err)
		}
		st.sharedStore = shared
		st.closers = append(st.closers, shared.Close)
		st.shared = startPicker{Redis: shared, creds: creds, picks: m.StoreSeries("redis", "pick")}
	default:
		st.creds = credstore.NewMemory(credstore.MemoryOptions{Now: now, MaxPerOwner: cfg.Limits.MaxCredentialsPerTenant})
		st.closers = append(st.closers, st.creds.Close)
		st.cooldowns = cooldown.NewMemory(now)
		if b, _ := cfg.RetryBudget(); b.Enabled() {
			st.budget = retrybudget.NewMemory(b)
		}
	}
	return st, nil
}

// addConfigured adds the credentials of the configuration to the store.
func (st *stores) addConfigured(ctx context.Context, cfg *config.Config) error {
	for _, pc := range cfg.Providers {
		for _, c := range pc.Credentials {
			if _, err := st.creds.Add(ctx, credstore.Credential{ID: c.ID, Provider: pc.Name, Secret: c.APIKey,
				Source: credstore.SourceConfig, BankedResets: c.BankedResets, AutoRedeem: c.AutoRedeem || pc.AutoRedeem,
				Account: c.Account}); err != nil {
				return fmt.Errorf("providers %s: credential %s: %w", pc.Name, c.ID, err)
			}
		}
	}
	return nil
}

// close closes the stores in the reverse order of their opening: the
// stores' background work first, the Redis client last. It returns the
// first error.
func (st *stores) close() error {
	var err error
	for i := len(st.closers) - 1; i >= 0; i-- {
		if cerr := st.closers[i](); err == nil {
			err = cerr
		}
	}
	st.closers = nil
	return err
}

// cooldownRegistry is the model cooldown registry: in memory, or shared
// through Redis.
type cooldownRegistry interface {
	session.Cooldowns
	Active(ctx context.Context) (map[string]time.Time, error)
	Admit(ctx context.Context, names ...string) (cooldown.Admission, error)
	Settle(ctx context.Context, model, token, outcome string, cooldown time.Duration) error
}

// probingCooldowns gives the session engine the cooldown registry with its
// half-open probes, and counts the probes' outcomes.
type probingCooldowns struct {
	cooldownRegistry
	metrics *metrics.Metrics
}

var _ session.Prober = probingCooldowns{}

func (p probingCooldowns) Admit(ctx context.Context, names ...string) (session.Admission, error) {
	a, err := p.cooldownRegistry.Admit(ctx, names...)
	return session.Admission{Allowed: a.Allowed, Probe: a.Probe, Token: a.Token, Name: a.Name}, err
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

// meteredCredentials is the credential store as the session engine gets
// it (credstore.Store is a session.Credentials), counting what it does, and
// with the pacing blocks of session.Pacer. A session of tenant T calls with
// a credential of T's pool (see package credstore): T's own credentials of
// the provider first, round-robin among the available ones, then the
// server's (those that serve every tenant), used when all of T's own are
// blocked or T has none; a usage limit switches to an available sibling of
// that same pool. No other tenant's credential is ever in T's pool.
type meteredCredentials struct {
	store   credstore.Store
	backend string
	metrics *metrics.Metrics
	picks   metrics.StoreSeries // the backend's "pick" series, counted on every model call
}

func newMeteredCredentials(store credstore.Store, backend string, m *metrics.Metrics) meteredCredentials {
	return meteredCredentials{store: store, backend: backend, metrics: m, picks: m.StoreSeries(backend, "pick")}
}

var _ session.Pacer = meteredCredentials{}

// PickPreferred implements session.Credentials.
func (a meteredCredentials) PickPreferred(ctx context.Context, tenant, providerName, prefer string) (c provider.Credential, ok bool, err error) {
	c, ok, err = a.store.PickPreferred(ctx, tenant, providerName, prefer)
	a.picks.Count(ignoreAllBlocked(err))
	return c, ok, err
}

// UsageLimited implements session.Credentials.
func (a meteredCredentials) UsageLimited(ctx context.Context, tenant, providerName, credID string, window time.Duration, fromProvider bool, reason string) (credstore.Switch, error) {
	sw, err := a.store.UsageLimited(ctx, tenant, providerName, credID, window, fromProvider, reason)
	a.metrics.StoreOp(a.backend, "block", err)
	if err == nil {
		a.metrics.CredentialBlocked(providerName, string(retry.BasisOf(fromProvider)))
		if sw.Redeemed {
			a.metrics.BankedResetRedeemed(providerName)
		}
	}
	return sw, err
}

// Paced blocks a credential whose rate limit is at 0 remaining until its
// reset (reason paced): the calls that follow go to a sibling or wait,
// instead of meeting a 429.
func (a meteredCredentials) Paced(ctx context.Context, tenant, providerName, credID string, wait time.Duration, reason string) error {
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

// refreshGauges sets the gauges read from the stores; the server runs it
// before each scrape.
func (st *stores) refreshGauges(ctx context.Context, m *metrics.Metrics, providers []string) {
	infos, err := st.creds.List(ctx, credstore.Filter{All: true})
	if err == nil {
		total := map[string]int{}
		blocked := map[string]int{}
		for _, i := range infos {
			total[i.Provider]++
			if i.Status == credstore.StatusBlocked {
				blocked[i.Provider]++
			}
		}
		for _, p := range providers {
			m.Credentials.WithLabelValues(p).Set(float64(total[p]))
			m.CredentialsBlocked.WithLabelValues(p).Set(float64(blocked[p]))
		}
	}
	if active, err := st.cooldowns.Active(ctx); err == nil {
		models := map[string]bool{} // a model and its server's keys' count once
		for name := range active {
			models[session.CooldownModel(name)] = true
		}
		m.ModelsInCooldown.Set(float64(len(models)))
	}
	if st.budget != nil {
		if levels, err := st.budget.Levels(ctx); err == nil {
			m.RetryBudgetLevels(levels)
		}
	}
	degraded := 0.0
	if st.creds.Degraded() {
		degraded = 1
	}
	m.StoreDegraded.Set(degraded)
}

// startPicker is the Redis session store whose prompt start carries the
// prompt's first credential pick (the credential store's script, on the same
// client) in the start's pipeline: one round trip before the model call.
type startPicker struct {
	*sessionstore.Redis
	creds *credstore.Redis
	picks metrics.StoreSeries // the "pick" series of the Redis backend
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
	if perr != nil {
		// The call picks again (and reports what the store says: every
		// credential blocked, or the store's failure).
		return res, session.Picked{}, nil //nolint:nilerr // the start succeeded; only its pick is redone
	}
	if !ok {
		// The provider has no credential: its call goes without one, as
		// the call's own pick would have it.
		p.picks.Count(nil)
		return res, session.Picked{None: true}, nil
	}
	p.picks.Count(nil)
	return res, session.Picked{Credential: c, OK: true}, nil
}
