// Package app is agentd's composition root: from the configuration it
// builds the stores (in memory, or on one Redis client), the tracing, the
// provider clients, the session engine and the servers, runs them, and
// stops them in the reverse order. A step that fails undoes every step
// before it, so that a failed start leaves no client, goroutine or
// listener behind.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/server"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/telemetry"
)

// stopTimeout bounds the drain that Run starts when its context is done.
const stopTimeout = 30 * time.Second

// App is a built agentd: its stores opened, its listeners bound.
type App struct {
	log    *slog.Logger
	srv    *server.Server
	stores *stores

	// undo closes what New opened, in the order it was opened; Stop runs
	// it backwards once the server has drained.
	undo []func(ctx context.Context) error

	stopOnce sync.Once
	srvErr   error // the server's Stop
	undoErr  error // closing the stores and the tracing
}

// Option tunes an App.
type Option func(*settings)

type settings struct {
	now           func() time.Time
	tracing       *telemetry.Tracing
	serverOpts    []server.Option
	adaptiveProcs bool
}

// WithClock sets the clock of the time that becomes data: event and history
// timestamps, stream tickets, credential blocks and model cooldowns (timers
// are not affected). Tests use it to expire a cooldown without waiting.
func WithClock(now func() time.Time) Option {
	return func(s *settings) { s.now = now }
}

// WithTracing traces with tr whatever the configuration says (benchmarks: a
// tracer provider that exports nowhere). The caller shuts tr down.
func WithTracing(tr *telemetry.Tracing) Option {
	return func(s *settings) { s.tracing = tr }
}

// WithAdaptiveProcs runs agentd on one P while it uses little CPU and on
// the runtime's default as soon as one is not enough (procs.go). It sets
// the whole process's GOMAXPROCS: agentd serve asks for it (unless the
// environment sets GOMAXPROCS), tests and embedders do not.
func WithAdaptiveProcs() Option {
	return func(s *settings) { s.adaptiveProcs = true }
}

// WithServerOptions passes opts to server.New (tests and benchmarks).
func WithServerOptions(opts ...server.Option) Option {
	return func(s *settings) { s.serverOpts = append(s.serverOpts, opts...) }
}

// New builds agentd from cfg and binds its listeners (so that port 0
// works: Server().GRPCAddr and HTTPAddr tell the bound addresses). When a
// step fails, what the steps before it opened is closed again, in the
// reverse order, before New returns the error.
func New(cfg *config.Config, log *slog.Logger, opts ...Option) (_ *App, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	set := settings{now: time.Now}
	for _, o := range opts {
		o(&set)
	}
	a := &App{log: log}
	defer func() {
		if err != nil {
			a.rollback()
		}
	}()

	retrySettings, err := cfg.RetrySettings()
	if err != nil {
		return nil, err
	}
	registry := prometheus.NewRegistry()
	mopts := MetricsOptions(cfg)
	m := metrics.New(registry, mopts)

	// Stores.
	st, err := openStores(cfg, log, m, set.now)
	if err != nil {
		return nil, err
	}
	a.stores = st
	a.undo = append(a.undo, func(context.Context) error {
		if err := st.close(); err != nil {
			return fmt.Errorf("stores: %w", err)
		}
		return nil
	})
	checkStoreAtStart(context.Background(), st, m, log)
	if err := st.addConfigured(context.Background(), cfg); err != nil {
		return nil, err
	}

	// Tracing.
	tracing := set.tracing
	if tracing == nil {
		if tracing, err = telemetry.Start(context.Background(), cfg.Telemetry, telemetry.Options{}); err != nil {
			return nil, err
		}
		if tracing != nil {
			// The last spans (the prompts the drain ended) go out once
			// the server has drained.
			a.undo = append(a.undo, func(ctx context.Context) error {
				if err := tracing.Shutdown(ctx); err != nil {
					return fmt.Errorf("telemetry: %w", err)
				}
				return nil
			})
		}
	}
	var tracer trace.Tracer
	if tracing != nil {
		tracer = tracing.Tracer()
	}

	// Providers and the session engine.
	providers, providerNames, err := buildProviders(cfg)
	if err != nil {
		return nil, err
	}
	var budget session.RetryBudget
	if st.budget != nil {
		budget = budgetAdapter{budget: st.budget, metrics: m, log: log}
	}
	sessions := session.NewManager(session.Options{
		Providers:         providers,
		Retry:             retrySettings,
		Credentials:       newMeteredCredentials(st.creds, cfg.Store.Backend, m),
		Cooldowns:         probingCooldowns{cooldownRegistry: st.cooldowns, metrics: m},
		Budget:            budget,
		Observer:          m,
		FallbackCooldown:  cfg.Retry.FallbackCooldownMs.Duration(),
		Now:               set.now,
		EventBuffer:       cfg.Sessions.EventBuffer,
		MaxPromptBytes:    cfg.Sessions.MaxPromptBytes,
		MaxSessions:       cfg.Sessions.MaxSessions,
		Limits:            sessionLimits(cfg.Limits),
		ToolResultTimeout: cfg.Sessions.ToolResultTimeoutMs.Duration(),
		Shared:            st.shared,
		LeaseTTL:          cfg.Store.Redis.LeaseMs.Duration(),
		Logger:            log,
		Tracer:            tracer,
		CaptureContent:    cfg.Telemetry.CaptureContent,
	})
	// Until the server owns the engine (its Stop drains it), a failed step
	// closes it here.
	closeSessions := func(ctx context.Context) error { return sessions.Close(ctx) }
	a.undo = append(a.undo, closeSessions)

	// The servers.
	deps := server.Deps{
		Sessions:  sessions,
		Creds:     st.creds,
		Providers: providerNames,
		Metrics:   m,
		Registry:  registry,
		Tracing:   tracing,
		RefreshGauges: func(ctx context.Context) {
			st.refreshGauges(ctx, m, mopts.Providers)
		},
		Now: set.now,
	}
	if st.rconn != nil {
		deps.Store = st.rconn
	}
	if st.shared != nil {
		deps.ReplicaID = st.shared.ReplicaID()
	}
	srv, err := server.New(cfg, log, deps, set.serverOpts...)
	if err != nil {
		return nil, err
	}
	a.srv = srv
	// The server's Stop drains and closes the engine from now on.
	a.undo = a.undo[:len(a.undo)-1]
	// Memory a passed load left free goes back to the OS (memory.go): the
	// load is the sessions, their readers and the clients' connections
	// (each holds buffers and a goroutine while it is open, idle or not);
	// a load that halved sheds the providers' idle connections and the
	// engine's waiting run goroutines too.
	stopReclaim := startReclaimer(func() int { return sessions.Count() + sessions.Subscribers() + srv.Connections() },
		func() { closeIdleConnections(providers); sessions.ShedIdleWorkers() })
	a.undo = append(a.undo, func(context.Context) error { stopReclaim(); return nil })
	if set.adaptiveProcs {
		stopProcs := startAdaptiveProcs()
		a.undo = append(a.undo, func(context.Context) error { stopProcs(); return nil })
	}
	return a, nil
}

// rollback closes what a failed New had opened, in the reverse order.
func (a *App) rollback() {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := a.runUndo(ctx); err != nil {
		a.log.Warn("agentd: closing after a failed start", "err", err)
	}
}

// runUndo runs the undo steps backwards and joins their errors.
func (a *App) runUndo(ctx context.Context) error {
	var errs []error
	for i := len(a.undo) - 1; i >= 0; i-- {
		if err := a.undo[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	a.undo = nil
	return errors.Join(errs...)
}

// Server is the API server (its bound addresses, the session engine).
func (a *App) Server() *server.Server { return a.srv }

// Run serves until ctx is done, then drains and closes everything. It
// returns the first serving error or the stop's error.
func (a *App) Run(ctx context.Context) error {
	err := a.srv.Run(ctx) // its drain when ctx is done included
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	a.stop(stopCtx)
	return errors.Join(err, a.undoErr)
}

// Stop drains the server (see server.Server.Stop), then closes the tracing
// and the stores. It is idempotent and bounded by ctx.
func (a *App) Stop(ctx context.Context) error {
	a.stop(ctx)
	return errors.Join(a.srvErr, a.undoErr)
}

func (a *App) stop(ctx context.Context) {
	a.stopOnce.Do(func() {
		a.srvErr = a.srv.Stop(ctx)
		a.undoErr = a.runUndo(ctx)
		a.log.Info("agentd stopped")
	})
}

// checkStoreAtStart probes the store once at start and logs why it cannot
// write (a wrong topology is said here, not only by /readyz), that too few
// replicas acknowledge its writes, or that Redis may evict its keys.
func checkStoreAtStart(ctx context.Context, st *stores, m *metrics.Metrics, log *slog.Logger) {
	m.StoreWritable.Set(1)
	m.StoreReplicasShort.Set(0)
	if st.rconn == nil {
		return
	}
	err := st.rconn.Writable(ctx)
	var short *redisconn.ShortOfReplicasError
	switch {
	case errors.As(err, &short):
		m.StoreReplicasShort.Set(1)
		log.Warn("store.redis: too few replicas acknowledge the store's writes (/readyz says degraded until they do)",
			"topology", string(st.rconn.Topology()), "err", err)
	case err != nil:
		m.StoreWritable.Set(0)
		log.Error("store.redis: the store cannot write (/readyz answers 503 until it can)",
			"topology", string(st.rconn.Topology()), "err", err)
	}
	var evicting *redisconn.EvictingError
	switch err := st.rconn.Evicting(ctx); {
	case errors.As(err, &evicting):
		log.Warn("store.redis: Redis may evict agentd's keys", "topology", string(st.rconn.Topology()), "err", err)
	case err != nil:
		log.Info("store.redis: could not read Redis' eviction policy (INFO memory)", "err", err)
	}
}
