// Package agentdtest starts agentd in-process for end-to-end tests: from a
// YAML configuration, through package app as cmd/agentd does, on loopback
// ports of its own, with clients for its gRPC, REST and SSE faces, a fake
// model provider and a redis-server when asked, and everything stopped
// when the test ends (t.Cleanup). It is what grpc-go's stubserver is to a
// gRPC service, for the whole of agentd.
//
//	a := agentdtest.Start(t, "retry: {base_delay_ms: 10}\n")
//	sess, err := a.Agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
//
// The internal tests of packages that app imports (server, session, …)
// cannot import it: see internal/server/apphook_test.go for how server's
// own tests reach package app.
package agentdtest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/server"
	"github.com/agentd/agentd/internal/testkit"
)

// Loopback is the listen section Start puts before the test's YAML: both
// faces on free loopback ports.
const Loopback = "listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n"

// Agentd is a running agentd and its clients.
type Agentd struct {
	// App is the composition root; Server its API server.
	App    *app.App
	Server *server.Server
	// Conn is a plaintext gRPC connection to the gRPC face, Agent and
	// Creds the services' clients on it.
	Conn  *grpc.ClientConn
	Agent agentdv1.AgentServiceClient
	Creds agentdv1.CredentialServiceClient
	// BaseURL is the HTTP face's root ("http://127.0.0.1:port"), HTTP a
	// client of its own (its idle connections closed at the end).
	BaseURL string
	HTTP    *http.Client
	// Redis is the redis-server WithRedis started (nil without it).
	Redis *redistest.Server

	t    testing.TB
	stop func()
}

// Option tunes Start.
type Option func(*settings)

type settings struct {
	appOpts     []app.Option
	log         *slog.Logger
	redis       bool
	redisPrefix string
	loopback    bool
}

// WithApp passes opts to app.New (app.WithClock, app.WithServerOptions,
// app.WithTracing).
func WithApp(opts ...app.Option) Option {
	return func(s *settings) { s.appOpts = append(s.appOpts, opts...) }
}

// WithLogger logs agentd's lines to log (default: nowhere).
func WithLogger(log *slog.Logger) Option {
	return func(s *settings) { s.log = log }
}

// WithRedis starts a redis-server of the test's own (the test skips when
// there is none, see redistest) and stores in it under keyPrefix: the YAML
// gets "store: {backend: redis, redis: {addr, key_prefix}}", so it must
// not have a store section of its own (start redistest.Start yourself and
// write it then).
func WithRedis(keyPrefix string) Option {
	return func(s *settings) { s.redis, s.redisPrefix = true, keyPrefix }
}

// WithOwnListen leaves the listen section to the YAML (Loopback is not put
// first), for a test of specific addresses. They must be loopback ones.
func WithOwnListen() Option {
	return func(s *settings) { s.loopback = false }
}

// Config parses yaml as agentd's configuration, failing the test with the
// parser's error.
func Config(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(strings.NewReader(yaml))
	if err != nil {
		t.Fatalf("agentdtest: config: %v", err)
	}
	return cfg
}

// Start builds agentd from Loopback followed by yaml, runs it and dials
// it. When the test ends the clients are closed, agentd drains within
// testkit.StopTimeout and Run's error, if any, fails the test.
func Start(t testing.TB, yaml string, opts ...Option) *Agentd {
	t.Helper()
	set := settings{loopback: true}
	for _, o := range opts {
		o(&set)
	}
	a := &Agentd{t: t}
	if set.loopback {
		yaml = Loopback + yaml
	}
	if set.redis {
		rt, ok := t.(*testing.T)
		if !ok {
			t.Fatal("agentdtest: WithRedis needs a *testing.T")
		}
		a.Redis = redistest.Start(rt)
		yaml += fmt.Sprintf("store:\n  backend: redis\n  redis: {addr: %q, key_prefix: %q}\n", a.Redis.Addr(), set.redisPrefix)
	}
	ap, err := app.New(Config(t, yaml), set.log, set.appOpts...)
	if err != nil {
		t.Fatalf("agentdtest: app.New: %v", err)
	}
	a.App, a.Server = ap, ap.Server()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ap.Run(ctx) }()
	a.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agentdtest: Run: %v", err)
			}
		case <-time.After(testkit.StopTimeout):
			t.Errorf("agentdtest: agentd did not stop within %v", testkit.StopTimeout)
		}
	}
	conn, err := grpc.NewClient(a.Server.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		a.stop()
		t.Fatalf("agentdtest: dial: %v", err)
	}
	a.Conn = conn
	a.Agent = agentdv1.NewAgentServiceClient(conn)
	a.Creds = agentdv1.NewCredentialServiceClient(conn)
	a.BaseURL = "http://" + a.Server.HTTPAddr()
	a.HTTP = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		conn.Close()
		a.HTTP.CloseIdleConnections()
		a.stop()
	})
	return a
}

// GRPCAddr is the gRPC face's bound address.
func (a *Agentd) GRPCAddr() string { return a.Server.GRPCAddr() }

// HTTPAddr is the HTTP face's bound address.
func (a *Agentd) HTTPAddr() string { return a.Server.HTTPAddr() }

// FakeProvider starts a fake model provider on a loopback port, speaking
// the providers' real wire formats (see providertest), closed when the
// test ends. Configure it as a provider whose base_url is its URL:
//
//	fake := agentdtest.FakeProvider(t, providertest.Options{})
//	a := agentdtest.Start(t, fmt.Sprintf("providers: [{name: up, kind: anthropic, base_url: %s, "+
//		"credentials: [{id: k1, api_key: sk-ant-test}]}]\n", fake.URL))
func FakeProvider(t testing.TB, opts providertest.Options) *providertest.Server {
	fake := providertest.NewServer(opts)
	t.Cleanup(fake.Close)
	return fake
}
