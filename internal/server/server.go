// Package server runs agentd's faces: the gRPC API (with health checking and
// reflection), the REST gateway with SSE, and the HTTP endpoints /metrics,
// /healthz and /readyz. It maps the session engine's events and errors onto
// the API; the session engine knows no transport.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/encoding/protojson"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/session"
)

// Server is a running agentd.
type Server struct {
	cfg      *config.Config
	log      *slog.Logger
	sessions *session.Manager
	creds    *credstore.Memory
	registry *prometheus.Registry
	now      func() time.Time

	grpcLis, httpLis net.Listener
	grpcSrv          *grpc.Server
	httpSrv          *http.Server
	health           *health.Server
	gwConn           *grpc.ClientConn

	draining atomic.Bool
	done     chan struct{}
	stopOnce sync.Once
	stopErr  error
}

// Option tunes a Server.
type Option func(*Server)

// WithClock sets the clock of the time that becomes data: event and history
// timestamps, credential blocks and model cooldowns (timers are not
// affected). Tests use it to expire a cooldown without waiting.
func WithClock(now func() time.Time) Option {
	return func(s *Server) { s.now = now }
}

// New builds a server from cfg and binds its listeners (so that port 0
// works: GRPCAddr and HTTPAddr tell the bound addresses).
func New(cfg *config.Config, log *slog.Logger, opts ...Option) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, done: make(chan struct{}), registry: prometheus.NewRegistry(), now: time.Now}
	for _, o := range opts {
		o(s)
	}

	retrySettings, err := cfg.RetrySettings()
	if err != nil {
		return nil, err
	}
	s.creds = credstore.NewMemory(s.now)
	providers := make([]session.Provider, 0, len(cfg.Providers))
	providerNames := map[string]bool{}
	for _, pc := range cfg.Providers {
		client, err := newProviderClient(pc)
		if err != nil {
			return nil, fmt.Errorf("providers %s: %w", pc.Name, err)
		}
		providers = append(providers, session.Provider{Name: pc.Name, Kind: pc.Kind, Models: pc.Models, Client: client})
		providerNames[pc.Name] = true
		for _, c := range pc.Credentials {
			if _, err := s.creds.Add(credstore.Credential{ID: c.ID, Provider: pc.Name, Secret: c.APIKey,
				Source: credstore.SourceConfig, BankedResets: c.BankedResets}); err != nil {
				return nil, err
			}
		}
	}
	s.sessions = session.NewManager(session.Options{
		Providers:        providers,
		Retry:            retrySettings,
		Credentials:      credentialAdapter{s.creds},
		Cooldowns:        cooldown.NewMemory(s.now),
		FallbackCooldown: time.Duration(cfg.Retry.FallbackCooldownMs) * time.Millisecond,
		Now:              s.now,
		EventBuffer:      cfg.Sessions.EventBuffer,
		MaxPromptBytes:   cfg.Sessions.MaxPromptBytes,
		MaxSessions:      cfg.Sessions.MaxSessions,
		Logger:           log,
	})

	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "agentd", Name: "sessions_active", Help: "Sessions in the registry.",
	}, func() float64 { return float64(s.sessions.Count()) }))

	tokens := map[string]string{}
	for _, t := range cfg.Auth.Tokens {
		tokens[t.Token] = t.Tenant
	}
	auth := newAuthenticator(tokens)
	s.grpcSrv = grpc.NewServer(
		grpc.ChainUnaryInterceptor(auth.unary),
		grpc.ChainStreamInterceptor(auth.stream),
	)
	agentdv1.RegisterAgentServiceServer(s.grpcSrv, &agentService{sessions: s.sessions, done: s.done})
	agentdv1.RegisterCredentialServiceServer(s.grpcSrv, &credentialService{store: s.creds, providers: providerNames})
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	reflection.Register(s.grpcSrv)

	if s.grpcLis, err = net.Listen("tcp", cfg.Listen.GRPC); err != nil {
		return nil, fmt.Errorf("listen.grpc: %w", err)
	}
	if s.httpLis, err = net.Listen("tcp", cfg.Listen.HTTP); err != nil {
		s.grpcLis.Close()
		return nil, fmt.Errorf("listen.http: %w", err)
	}
	handler, err := s.httpHandler()
	if err != nil {
		s.grpcLis.Close()
		s.httpLis.Close()
		return nil, err
	}
	s.httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

func newProviderClient(pc config.Provider) (provider.Provider, error) {
	switch pc.Kind {
	case provider.KindSimulated:
		return simProvider{sim.New(sim.Options{
			FirstTokenDelay: time.Duration(pc.FirstTokenDelayMs) * time.Millisecond,
			TokenDelay:      time.Duration(pc.TokenDelayMs) * time.Millisecond,
		})}, nil
	default:
		return nil, fmt.Errorf("provider kind %q is not available in this build yet", pc.Kind)
	}
}

// simProvider lets the session engine reject a bad fault script up front.
type simProvider struct{ *sim.Provider }

func (p simProvider) ValidatePrompt(text string) error {
	_, err := sim.ParseScript(text)
	return err
}

// credentialAdapter gives the session engine the credential store.
type credentialAdapter struct{ *credstore.Memory }

func (a credentialAdapter) UsageLimited(ctx context.Context, providerName, credID string, window time.Duration, fromProvider bool, reason string) (session.CredentialSwitch, error) {
	sw, err := a.Memory.UsageLimited(ctx, providerName, credID, window, fromProvider, reason)
	return session.CredentialSwitch{Switched: sw.Switched, To: sw.To, SiblingFreeIn: sw.SiblingFreeIn, HasSibling: sw.HasSibling}, err
}

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// Sessions is the session engine (for tests and tools in this module).
func (s *Server) Sessions() *session.Manager { return s.sessions }

// httpHandler is the HTTP face: the gateway (JSON and SSE), /metrics,
// /healthz and /readyz.
func (s *Server) httpHandler() (http.Handler, error) {
	conn, err := grpc.NewClient(s.grpcLis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	s.gwConn = conn
	jsonpb := runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitDefaultValues: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &jsonpb),
		runtime.WithMarshalerOption(sseContentType, &sseMarshaler{JSONPb: jsonpb}),
		runtime.WithIncomingHeaderMatcher(func(h string) (string, bool) {
			if http.CanonicalHeaderKey(h) == "Last-Event-Id" {
				return lastEventIDKey, true
			}
			return runtime.DefaultHeaderMatcher(h)
		}),
	)
	ctx := context.Background()
	if err := agentdv1.RegisterAgentServiceHandler(ctx, gw, conn); err != nil {
		return nil, err
	}
	if err := agentdv1.RegisterCredentialServiceHandler(ctx, gw, conn); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", sseHeaders(gw))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		// The memory store is always reachable.
		fmt.Fprintln(w, "ready")
	})
	return mux, nil
}

// Run serves until ctx is done, then drains. It returns the first serving
// error or the drain's error.
func (s *Server) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpcSrv.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := s.httpSrv.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.log.Info("agentd serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr())
	g.Go(func() error {
		<-gctx.Done()
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return s.Stop(stopCtx)
	})
	return g.Wait()
}

// Stop drains: readiness goes down, every running prompt ends with a
// prompt_end event, event streams end after their last event, then the HTTP
// and gRPC servers stop. It is idempotent and bounded by ctx.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.draining.Store(true)
		s.health.Shutdown()
		var errs []error
		if err := s.sessions.Close(ctx); err != nil {
			errs = append(errs, err)
		}
		close(s.done)
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		stopped := make(chan struct{})
		go func() { s.grpcSrv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			s.grpcSrv.Stop()
			<-stopped
			errs = append(errs, fmt.Errorf("grpc graceful stop: %w", ctx.Err()))
		}
		if err := s.gwConn.Close(); err != nil {
			errs = append(errs, err)
		}
		s.stopErr = errors.Join(errs...)
		s.log.Info("agentd stopped")
	})
	return s.stopErr
}
