package server

import (
	"context"
	"log/slog"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/telemetry"
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
