package server_test

import (
	"log/slog"

	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/server"
	"github.com/agentd/agentd/internal/telemetry"
)

// The tests of package server itself start agentd through package app too.
func init() {
	server.SetNewTestApp(func(cfg *config.Config, log *slog.Logger, tr *telemetry.Tracing, opts ...server.Option) (server.TestApp, error) {
		aopts := []app.Option{app.WithServerOptions(opts...)}
		if tr != nil {
			aopts = append(aopts, app.WithTracing(tr))
		}
		a, err := app.New(cfg, log, aopts...)
		if err != nil {
			return nil, err
		}
		return a, nil
	})
}
