package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/telemetry"
	"github.com/agentd/agentd/internal/testkit"
)

// TestApp is agentd as package app builds it: its server, run and stopped.
type TestApp interface {
	Server() *Server
	Run(ctx context.Context) error
	Stop(ctx context.Context) error
}

// NewTestAppFunc builds agentd from cfg as package app does, tracing with tr
// when it is not nil, with opts passed to New.
type NewTestAppFunc func(cfg *config.Config, log *slog.Logger, tr *telemetry.Tracing, opts ...Option) (TestApp, error)

// newTestApp is package app's New. This package's own tests cannot import
// app (it imports server), so apphook_test.go, an external test file of this
// directory compiled into the same test binary, sets it from its init.
var newTestApp NewTestAppFunc

// SetNewTestApp sets what this package's own tests start agentd with.
func SetNewTestApp(f NewTestAppFunc) { newTestApp = f }

// startTestApp builds agentd from the listen section of agentdtest (both
// faces on free loopback ports) followed by yaml, as package app does, and
// runs it until the test ends; the drain is bounded by testkit.StopTimeout.
// It is agentdtest.Start for this package's own tests, which cannot import
// agentdtest (it imports app, which imports server).
func startTestApp(t testing.TB, yaml string, log *slog.Logger, tr *telemetry.Tracing, opts ...Option) TestApp {
	t.Helper()
	cfg, err := config.Parse(strings.NewReader("listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n" + yaml))
	if err != nil {
		t.Fatal(err)
	}
	a, err := newTestApp(cfg, log, tr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(testkit.StopTimeout):
			t.Errorf("agentd did not stop within %v", testkit.StopTimeout)
		}
	})
	return a
}

// PendingUTF8 is how many requests the codec read as not UTF-8 whose call
// the guard has not answered yet.
func (s *Server) PendingUTF8() int {
	n := 0
	s.utf8.bad.Range(func(any, any) bool { n++; return true })
	return n
}

// StreamsOpen is how many event streams tenant holds open on this server
// (limits.max_streams_per_tenant counts them).
func (s *Server) StreamsOpen(tenant string) int {
	s.agent.followers.mu.Lock()
	defer s.agent.followers.mu.Unlock()
	return s.agent.followers.open[tenant]
}
