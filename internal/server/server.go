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
	goruntime "runtime"
	"slices"
	"strings"
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
	"google.golang.org/grpc/test/bufconn"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/server/sse"
	"github.com/agentd/agentd/internal/server/token"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/telemetry"
)

// Server is agentd's API: the gRPC and HTTP servers over a session engine
// and stores that package app built.
type Server struct {
	tracing       *telemetry.Tracing // nil: tracing off
	cfg           *config.Config
	log           *slog.Logger
	sessions      *session.Manager
	creds         credstore.Store
	store         StoreProbe // nil: the memory store
	utf8          utf8Guard  // requests whose strings are not UTF-8 (utf8.go)
	replicaID     string
	refreshGauges func(ctx context.Context)
	tickets       *token.Tickets
	auth          *authenticator
	metrics       *metrics.Metrics
	registry      *prometheus.Registry
	now           func() time.Time

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

	// conns counts the HTTP listener's open connections (countConn).
	conns atomic.Int64

	draining atomic.Bool
	drain    context.Context // done when the server drains
	drained  context.CancelFunc
	stopOnce sync.Once
	stopErr  error
}

// Deps are what the server serves, built by package app.
type Deps struct {
	// Sessions is the session engine; the server's Stop drains and closes it.
	Sessions *session.Manager
	// Creds is the credential store (CredentialService, readiness).
	Creds credstore.Store
	// Providers are the configured providers' names (CredentialService
	// accepts credentials for these).
	Providers []string
	// Metrics and Registry are the metrics and their registry (/metrics).
	Metrics  *metrics.Metrics
	Registry *prometheus.Registry
	// RefreshGauges sets the gauges read from the stores; it runs before
	// each scrape (nil: none).
	RefreshGauges func(ctx context.Context)
	// Store is the Redis store's write probe (/readyz); nil with the
	// memory store.
	Store StoreProbe
	// ReplicaID names this replica with the Redis store ("" in memory).
	ReplicaID string
	// Tracing traces the API calls (nil: tracing off). The server flushes
	// it (FlushTraces) but does not shut it down.
	Tracing *telemetry.Tracing
	// Now is the clock of the time that becomes data (stream tickets);
	// nil is time.Now.
	Now func() time.Time
}

// StoreProbe tells whether the shared store can write (see
// redisconn.Conn.Writable).
type StoreProbe interface {
	Writable(ctx context.Context) error
}

// Option tunes a Server.
type Option func(*Server)

// withViaGateway serves the requests of the native routes for which via
// reports true as before them: through the gateway (the prompt start: its
// in-process gRPC call). Tests and benchmarks compare the two.
func withViaGateway(via func(*http.Request) bool) Option {
	return func(s *Server) { s.viaGateway = via }
}

// withoutSharedFrames makes every native SSE reader encode its own frames
// (benchmarks).
func withoutSharedFrames() Option {
	return func(s *Server) { s.noSharedFrames = true }
}

// New builds the servers of cfg over deps and binds their listeners (so
// that port 0 works: GRPCAddr and HTTPAddr tell the bound addresses). On an
// error nothing stays bound.
func New(cfg *config.Config, log *slog.Logger, deps Deps, opts ...Option) (_ *Server, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, sessions: deps.Sessions, creds: deps.Creds, store: deps.Store,
		replicaID: deps.ReplicaID, refreshGauges: deps.RefreshGauges, metrics: deps.Metrics,
		registry: deps.Registry, tracing: deps.Tracing, now: deps.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if s.refreshGauges == nil {
		s.refreshGauges = func(context.Context) {}
	}
	s.drain, s.drained = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	providerNames := map[string]bool{}
	for _, p := range deps.Providers {
		providerNames[p] = true
	}
	// What was bound or dialled so far, closed again when a later step
	// fails.
	var undo []func() error
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				_ = undo[i]()
			}
		}
	}()

	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "agentd", Name: "sessions_active", Help: "Sessions in the registry.",
	}, func() float64 { return float64(s.sessions.Count()) }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "agentd", Name: "event_subscribers", Help: "Readers following sessions' events (Prompt and StreamEvents streams, SSE).",
	}, func() float64 { return float64(s.sessions.Subscribers()) }))
	grpcMetrics := metrics.NewGRPCServer()
	s.registry.MustRegister(grpcMetrics)

	tokens := map[string]caller{}
	for _, t := range cfg.Auth.Tokens {
		tokens[t.Token] = caller{tenant: t.Tenant, admin: t.Admin}
	}
	auth := newAuthenticator(tokens)
	s.auth = auth
	s.unaryInterceptors = unaryChain{grpcMetrics.UnaryInterceptor, auth.unary}
	s.streamInterceptors = streamChain{grpcMetrics.StreamInterceptor, auth.stream}
	if s.tracing != nil {
		// The caller's trace context (traceparent metadata; the HTTP face
		// forwards the header) becomes the parent of the prompt's span.
		s.unaryInterceptors = append(unaryChain{telemetry.UnaryServerInterceptor}, s.unaryInterceptors...)
		s.streamInterceptors = append(streamChain{telemetry.StreamServerInterceptor}, s.streamInterceptors...)
	}
	guard := newUTF8Guard()
	s.utf8 = guard
	s.grpcSrv = grpc.NewServer(
		// No token, no read: the tap refuses before the message is read.
		grpc.InTapHandle(auth.tap),
		grpc.MaxRecvMsgSize(int(cfg.Limits.MaxRequestBytes)),
		// A call's metadata is bounded as the HTTP face's headers are
		// (grpc-go's own bound is 16 MiB, read before the tap runs).
		grpc.MaxHeaderListSize(http.DefaultMaxHeaderBytes),
		// A call's handler runs on one of a few long-lived goroutines
		// when one is free (a new goroutine otherwise): their stacks are
		// grown already, and a prompt starts sooner (added TTFT over gRPC
		// 0.970x paired, 3 rounds).
		grpc.NumStreamWorkers(uint32(2*goruntime.GOMAXPROCS(0))),
		// Streamed chunks encoded without reflection (codec.go); a
		// request's string that is not UTF-8 refused as bad input, naming
		// its field (utf8.go). The guard runs before the last interceptor,
		// the token's (the tap has refused a call without one already):
		// no interceptor before it refuses a call, so each request the
		// codec noted is looked at, and forgotten.
		grpc.ForceServerCodecV2(newEventCodec(guard)),
		grpc.ChainUnaryInterceptor(slices.Insert(slices.Clone(s.unaryInterceptors), len(s.unaryInterceptors)-1, guard.unary)...),
		grpc.ChainStreamInterceptor(slices.Insert(slices.Clone(s.streamInterceptors), len(s.streamInterceptors)-1, guard.stream)...),
	)
	// Its stream workers run from here on, served or not.
	undo = append(undo, func() error { s.grpcSrv.Stop(); return nil })
	s.tickets = token.NewTickets(cfg.HTTP.TicketKey, cfg.HTTP.TicketTTLMs.Duration(), s.now)
	s.agent = &agentService{sessions: s.sessions, tickets: s.tickets, pages: s.tickets.Pages(), drain: s.drain,
		followers: newStreamSlots(cfg.Limits.MaxStreamsPerTenant)}
	agentdv1.RegisterAgentServiceServer(s.grpcSrv, s.agent)
	agentdv1.RegisterCredentialServiceServer(s.grpcSrv, &credentialService{store: s.creds, providers: providerNames})
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	reflection.Register(s.grpcSrv)
	grpcMetrics.Initialize(s.grpcSrv)

	if s.grpcLis, err = net.Listen("tcp", cfg.Listen.GRPC); err != nil {
		return nil, fmt.Errorf("listen.grpc: %w", err)
	}
	undo = append(undo, s.grpcLis.Close)
	if s.httpLis, err = net.Listen("tcp", cfg.Listen.HTTP); err != nil {
		return nil, fmt.Errorf("listen.http: %w", err)
	}
	undo = append(undo, s.httpLis.Close)
	handler, err := s.httpHandler()
	if s.gwConn != nil {
		undo = append(undo, s.gwConn.Close)
	}
	if err != nil {
		return nil, err
	}
	s.httpSrv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: cfg.HTTP.IdleTimeoutMs.Duration(), ConnState: s.countConn}
	if addr := cfg.Metrics.Listen; addr != "" {
		if s.metricsLis, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("metrics.listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.metricsRoute())
		s.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return s, nil
}

// countConn keeps conns: a connection counts from its accept to its close
// (or its hijack, after which the server no longer holds it).
func (s *Server) countConn(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.conns.Add(1)
	case http.StateClosed, http.StateHijacked:
		s.conns.Add(-1)
	}
}

// Connections is the number of open connections on the HTTP listener,
// idle keep-alive ones included.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// MetricsAddr is the bound address of the metrics listener ("" when
// /metrics is on the HTTP port).
func (s *Server) MetricsAddr() string {
	if s.metricsLis == nil {
		return ""
	}
	return s.metricsLis.Addr().String()
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
	jsonpb := sse.APIJSON()
	events := &sse.Marshaler{JSONPb: jsonpb}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &jsonpb),
		runtime.WithMarshalerOption(sse.ContentType, events),
		runtime.WithIncomingHeaderMatcher(memoHeaders(matchHeader, commonHeaders)),
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
	mux.Handle("/v1/", s.webAPI(gw, events)) // CORS, auth and body limits, stream tickets, native SSE, heartbeats (web.go)
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
// matchHeader is the gateway's incoming header matcher: the HTTP headers
// the service sees as metadata, and under which keys.
func matchHeader(h string) (string, bool) {
	switch http.CanonicalHeaderKey(h) {
	case "Last-Event-Id":
		return lastEventIDKey, true
	case "Traceparent", "Tracestate":
		// W3C trace context, for the prompt's span.
		return strings.ToLower(h), true
	}
	return runtime.DefaultHeaderMatcher(h)
}

// commonHeaders are the header keys (as net/http's server keeps them,
// canonical) whose match memoHeaders keeps: the ones the gateway forwards,
// and the ones clients send most that it does not.
var commonHeaders = []string{
	"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges", "Authorization",
	"Cache-Control", "Connection", "Content-Length", "Content-Type", "Cookie", "Date", "Expect", "From",
	"Host", "If-Match", "If-Modified-Since", "If-None-Match", "If-Schedule-Tag-Match", "If-Unmodified-Since",
	"Last-Event-Id", "Max-Forwards", "Origin", "Pragma", "Referer", "Sec-Fetch-Dest", "Sec-Fetch-Mode",
	"Sec-Fetch-Site", "Traceparent", "Tracestate", "User-Agent", "Via", "Warning", "X-Forwarded-For",
	"X-Forwarded-Host", "X-Forwarded-Proto", "X-Request-Id",
}

// memoHeaders returns match with its answers for keys made once: the
// gateway asks for every header of every request, and match canonicalizes
// the key (twice, with the gateway's own matcher) and makes the metadata
// key anew each time, ≈ 1000 instructions and an allocation a header.
// Other keys are matched on the spot.
func memoHeaders(match func(string) (string, bool), keys []string) func(string) (string, bool) {
	type answer struct {
		key string
		ok  bool
	}
	known := make(map[string]answer, len(keys))
	for _, k := range keys {
		md, ok := match(k)
		known[k] = answer{md, ok}
	}
	return func(h string) (string, bool) {
		if a, ok := known[h]; ok {
			return a.key, a.ok
		}
		return match(h)
	}
}

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
	if s.replicaID != "" {
		s.log.Info("agentd serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "store", "redis", "replica", s.replicaID)
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
// and gRPC servers stop. It is idempotent and bounded by ctx. The stores
// and the tracing are package app's to close.
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
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
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
