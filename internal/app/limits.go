package app

import (
	"time"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/session"
)

// sessionLimits are the configuration's limits that the session engine
// enforces (per tenant, across replicas with the Redis store, and per
// session).
func sessionLimits(l config.Limits) session.Limits {
	return session.Limits{
		MaxSessionsPerTenant:          l.MaxSessionsPerTenant,
		MaxConcurrentPromptsPerTenant: l.MaxConcurrentPromptsPerTenant,
		MaxTools:                      l.MaxTools,
		MaxSystemPromptBytes:          l.MaxSystemPromptBytes,
		MinBaseDelay:                  time.Duration(l.MinBaseDelayMs) * time.Millisecond,
		MaxRetriesCap:                 l.MaxRetriesCap,
	}
}
