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
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/anthropic"
	"github.com/agentd/agentd/internal/provider/bedrock"
	"github.com/agentd/agentd/internal/provider/gemini"
	"github.com/agentd/agentd/internal/provider/openai"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/sessionstore"
	"github.com/agentd/agentd/internal/telemetry"
)

// Server is a running agentd.
type Server struct {
	tracing         *telemetry.Tracing // nil: tracing off
	cfg             *config.Config
	log             *slog.Logger
	sessions        *session.Manager
	creds           credstore.Store
	redis           redis.UniversalClient
	rconn           *redisconn.Conn
	shared          session.Shared // sessions shared by the replicas (Redis); nil in memory
	sharedStore     *sessionstore.Redis
	cooldowns       cooldownRegistry
	budget          retryBudget                     // nil: no retry.budget
	budgetClose     func(ctx context.Context) error // the shared budget's flusher
	tickets         *ticketAuthority
	auth            *authenticator
	metrics         *metrics.Metrics
	metricProviders []string
	registry        *prometheus.Registry
	now             func() time.Time

	grpcLis, httpLis net.Listener
	grpcSrv          *grpc.Server
	httpSrv          *http.Server
	// metricsLis and metricsSrv serve /metrics alone (metrics.listen).
	metricsLis net.Listener
	metricsSrv *http.Server
	health     *health.Server
	gwConn     *grpc.ClientConn
	// gwLis is the gateway's in-process way to the gRPC server: no second
	// TCP hop for REST and SSE.
	gwLis *bufconn.Listener

	// The gRPC server's interceptors, which the native routes run too, and
	// its AgentService.
	unaryInterceptors  unaryChain
	streamInterceptors streamChain
	agent              *agentService
	viaGateway         func(*http.Request) bool // tests: requests served as before the native routes
	noSharedFrames     bool                     // benchmarks: every SSE reader encodes its frames

	draining atomic.Bool
	drain    context.Context // done when the server drains
	drained  context.CancelFunc
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

// withViaGateway serves the requests of the native routes for which via
// reports true as before them: through the gateway (the prompt start: its
// in-process gRPC call). Tests and benchmarks compare the two.
func withViaGateway(via func(*http.Request) bool) Option {
	return func(s *Server) { s.viaGateway = via }
}

// withTracing traces with tr whatever the configuration says
// (benchmarks: a tracer provider that exports nowhere).
func withTracing(tr *telemetry.Tracing) Option {
	return func(s *Server) { s.tracing = tr }
}

// withoutSharedFrames makes every native SSE reader encode its own frames
// (benchmarks).
func withoutSharedFrames() Option {
	return func(s *Server) { s.noSharedFrames = true }
}

// New builds a server from cfg and binds its listeners (so that port 0
// works: GRPCAddr and HTTPAddr tell the bound addresses).
func New(cfg *config.Config, log *slog.Logger, opts ...Option) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, registry: prometheus.NewRegistry(), now: time.Now}
	s.drain, s.drained = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}

	retrySettings, err := cfg.RetrySettings()
	if err != nil {
		return nil, err
	}
	mopts := metrics.OptionsFor(cfg)
	s.metricProviders = mopts.Providers
	s.metrics = metrics.New(s.registry, mopts)
	if err := s.openStores(context.Background()); err != nil {
		return nil, err
	}
	if s.tracing == nil {
		if s.tracing, err = telemetry.Start(context.Background(), cfg.Telemetry, telemetry.Options{}); err != nil {
			s.closeStores()
			return nil, err
		}
	}
	var tracer trace.Tracer
	if s.tracing != nil {
		tracer = s.tracing.Tracer()
	}
	providers := make([]session.Provider, 0, len(cfg.Providers))
	providerNames := map[string]bool{}
	for _, pc := range cfg.Providers {
		client, err := newProviderClient(pc)
		if err != nil {
			return nil, fmt.Errorf("providers %s: %w", pc.Name, err)
		}
		providers = append(providers, session.Provider{Name: pc.Name, Kind: pc.Kind, Models: pc.ModelNames(), Catalog: pc.Catalog(),
			RotateCredentials: !pc.Sticky(), Client: client, Pace: pc.Paces()})
		providerNames[pc.Name] = true
	}
	var budget session.RetryBudget
	if s.budget != nil {
		budget = budgetAdapter{budget: s.budget, metrics: s.metrics, log: log}
	}
	s.sessions = session.NewManager(session.Options{
		Providers:         providers,
		Retry:             retrySettings,
		Credentials:       credentialAdapter{store: s.creds, backend: cfg.Store.Backend, metrics: s.metrics},
		Cooldowns:         probingCooldowns{cooldownRegistry: s.cooldowns, metrics: s.metrics},
		Budget:            budget,
		Observer:          s.metrics,
		FallbackCooldown:  time.Duration(cfg.Retry.FallbackCooldownMs) * time.Millisecond,
		Now:               s.now,
		EventBuffer:       cfg.Sessions.EventBuffer,
		MaxPromptBytes:    cfg.Sessions.MaxPromptBytes,
		MaxSessions:       cfg.Sessions.MaxSessions,
		Limits:            sessionLimits(cfg.Limits),
		ToolResultTimeout: time.Duration(cfg.Sessions.ToolResultTimeoutMs) * time.Millisecond,
		Shared:            s.shared,
		LeaseTTL:          time.Duration(cfg.Store.Redis.LeaseMs) * time.Millisecond,
		Logger:            log,
		Tracer:            tracer,
		CaptureContent:    cfg.Telemetry.CaptureContent,
	})

	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "agentd", Name: "sessions_active", Help: "Sessions in the registry.",
	}, func() float64 { return float64(s.sessions.Count()) }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "agentd", Name: "event_subscribers", Help: "Readers following sessions' events (Prompt and StreamEvents streams, SSE).",
	}, func() float64 { return float64(s.sessions.Subscribers()) }))
	grpcMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	s.registry.MustRegister(grpcMetrics)

	tokens := map[string]caller{}
	for _, t := range cfg.Auth.Tokens {
		tokens[t.Token] = caller{tenant: t.Tenant, admin: t.Admin}
	}
	auth := newAuthenticator(tokens)
	s.auth = auth
	s.unaryInterceptors = unaryChain{grpcMetrics.UnaryServerInterceptor(), auth.unary}
	s.streamInterceptors = streamChain{grpcMetrics.StreamServerInterceptor(), auth.stream}
	if s.tracing != nil {
		// The caller's trace context (traceparent metadata; the HTTP face
		// forwards the header) becomes the parent of the prompt's span.
		s.unaryInterceptors = append(unaryChain{telemetry.UnaryServerInterceptor}, s.unaryInterceptors...)
		s.streamInterceptors = append(streamChain{telemetry.StreamServerInterceptor}, s.streamInterceptors...)
	}
	s.grpcSrv = grpc.NewServer(
		// No token, no read: the tap refuses before the message is read.
		grpc.InTapHandle(auth.tap),
		grpc.MaxRecvMsgSize(int(cfg.Limits.MaxRequestBytes)),
		grpc.ChainUnaryInterceptor(s.unaryInterceptors...),
		grpc.ChainStreamInterceptor(s.streamInterceptors...),
	)
	s.tickets = newTicketAuthority(cfg.HTTP.TicketKey, time.Duration(cfg.HTTP.TicketTTLMs)*time.Millisecond, s.now)
	s.agent = &agentService{sessions: s.sessions, tickets: s.tickets, pages: newPageTokens(s.tickets.key), drain: s.drain}
	agentdv1.RegisterAgentServiceServer(s.grpcSrv, s.agent)
	agentdv1.RegisterCredentialServiceServer(s.grpcSrv, &credentialService{store: s.creds, providers: providerNames})
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	reflection.Register(s.grpcSrv)
	grpcMetrics.InitializeMetrics(s.grpcSrv)

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
	if addr := cfg.Metrics.Listen; addr != "" {
		if s.metricsLis, err = net.Listen("tcp", addr); err != nil {
			s.grpcLis.Close()
			s.httpLis.Close()
			return nil, fmt.Errorf("metrics.listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.metricsRoute())
		s.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
}

// MetricsAddr is the bound address of the metrics listener ("" when
// /metrics is on the HTTP port).
func (s *Server) MetricsAddr() string {
	if s.metricsLis == nil {
		return ""
	}
	return s.metricsLis.Addr().String()
}

func newProviderClient(pc config.Provider) (provider.Provider, error) {
	timeout := time.Duration(pc.TimeoutMs) * time.Millisecond
	readTimeout := time.Duration(pc.ReadTimeoutMs) * time.Millisecond
	switch pc.Kind {
	case provider.KindSimulated:
		return simProvider{sim.New(sim.Options{
			FirstTokenDelay: time.Duration(pc.FirstTokenDelayMs) * time.Millisecond,
			TokenDelay:      time.Duration(pc.TokenDelayMs) * time.Millisecond,
			NoPromptCache:   !pc.PromptCacheOn(),
		})}, nil
	case provider.KindAnthropic:
		return anthropic.New(anthropic.Options{BaseURL: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout,
			Headers: pc.Headers, AuthHeader: pc.AuthHeader, MaxTokens: pc.MaxTokens, NoPromptCache: !pc.PromptCacheOn()}), nil
	case provider.KindOpenAIResponses, provider.KindOpenAIChat:
		api := openai.APIResponses
		if pc.Kind == provider.KindOpenAIChat {
			api = openai.APIChat
		}
		return openai.New(openai.Options{API: api, BaseURL: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout,
			Headers: pc.Headers, AuthHeader: pc.AuthHeader, ChainResponses: pc.ChainResponses,
			EncryptedReasoning: pc.EncryptedReasoning, NoPromptCache: !pc.PromptCacheOn()}), nil
	case provider.KindAzureOpenAI:
		return openai.New(openai.Options{Azure: true, APIVersion: pc.APIVersion, BaseURL: pc.BaseURL, Timeout: timeout,
			ReadTimeout: readTimeout, Headers: pc.Headers, AuthHeader: pc.AuthHeader, API: pc.API, EntraID: pc.EntraID,
			TokenURL: pc.TokenURL, ChainResponses: pc.ChainResponses, EncryptedReasoning: pc.EncryptedReasoning}), nil
	case provider.KindBedrock:
		return bedrock.New(bedrock.Options{Region: pc.Region, Endpoint: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout,
			MaxTokens: pc.MaxTokens}), nil
	case provider.KindGemini:
		return gemini.New(gemini.Options{BaseURL: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout,
			Headers: pc.Headers, AuthHeader: pc.AuthHeader}), nil
	case provider.KindVertex:
		return gemini.New(gemini.Options{BaseURL: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout, Headers: pc.Headers,
			AuthHeader: pc.AuthHeader, Vertex: &gemini.VertexOptions{Project: pc.Project, Location: pc.Location, TokenURL: pc.TokenURL}}), nil
	default:
		return nil, fmt.Errorf("unknown provider kind %q", pc.Kind)
	}
}

// simProvider lets the session engine reject a bad fault script up front.
type simProvider struct{ *sim.Provider }

func (p simProvider) ValidatePrompt(text string) error {
	_, err := sim.ParseScript(text)
	return err
}

// FlushTraces exports the spans that ended so far (no-op with tracing off).
func (s *Server) FlushTraces(ctx context.Context) error {
	if s.tracing == nil {
		return nil
	}
	return s.tracing.ForceFlush(ctx)
}

// GRPCAddr is the bound gRPC address.
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// Sessions is the session engine (for tests and tools in this module).
func (s *Server) Sessions() *session.Manager { return s.sessions }

// httpHandler is the HTTP face: the gateway (JSON), the native SSE routes, /metrics,
// /healthz and /readyz.
func (s *Server) httpHandler() (http.Handler, error) {
	s.gwLis = bufconn.Listen(1 << 20)
	conn, err := grpc.NewClient("passthrough:///agentd-gateway",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.gwLis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Answers are bounded by the server (pages by bytes, entries by
		// the request limit): the gateway takes whatever it sends.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	s.gwConn = conn
	jsonpb := runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitDefaultValues: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}
	sse := &sseMarshaler{JSONPb: jsonpb}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &jsonpb),
		runtime.WithMarshalerOption(sseContentType, sse),
		runtime.WithIncomingHeaderMatcher(func(h string) (string, bool) {
			switch http.CanonicalHeaderKey(h) {
			case "Last-Event-Id":
				return lastEventIDKey, true
			case "Traceparent", "Tracestate":
				// W3C trace context, for the prompt's span.
				return strings.ToLower(h), true
			}
			return runtime.DefaultHeaderMatcher(h)
		}),
		runtime.WithMetadata(grantMetadata), // stream tickets (web.go)
	)
	ctx := context.Background()
	if err := agentdv1.RegisterAgentServiceHandler(ctx, gw, conn); err != nil {
		return nil, err
	}
	if err := agentdv1.RegisterCredentialServiceHandler(ctx, gw, conn); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.webAPI(gw, sse)) // CORS, auth and body limits, stream tickets, native SSE, heartbeats (web.go)
	mountConsole(mux)
	if s.cfg.Metrics.Listen == "" {
		mux.Handle("GET /metrics", s.metricsRoute())
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz) // readiness.go
	if !s.auth.required() {
		// Local mode: this machine's requests only, and no browser page
		// elsewhere may change anything (guard.go).
		return newHostGuard(mux, s.cfg.HTTP.AllowedHosts, s.cfg.HTTP.CORS.AllowedOrigins), nil
	}
	return mux, nil
}

// metricsRoute serves the registry, its store gauges refreshed first.
func (s *Server) metricsRoute() http.Handler {
	return s.metricsHandler(promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
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
		if err := s.grpcSrv.Serve(s.gwLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc (gateway): %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := s.httpSrv.Serve(s.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	if s.metricsSrv != nil {
		g.Go(func() error {
			if err := s.metricsSrv.Serve(s.metricsLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics: %w", err)
			}
			return nil
		})
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if s.shared != nil {
		s.log.Info("agentd serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "store", "redis", "replica", s.shared.ReplicaID())
	} else {
		s.log.Info("agentd serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "store", "memory")
	}
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
		s.drained()
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		if s.metricsSrv != nil {
			if err := s.metricsSrv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("metrics shutdown: %w", err))
			}
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
		if err := s.closeStores(); err != nil {
			errs = append(errs, fmt.Errorf("stores: %w", err))
		}
		if s.tracing != nil {
			// The last spans (the prompts the drain ended) go out.
			if err := s.tracing.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("telemetry: %w", err))
			}
		}
		s.stopErr = errors.Join(errs...)
		s.log.Info("agentd stopped")
	})
	return s.stopErr
}
