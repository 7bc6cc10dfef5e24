package app

import (
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
		MinBaseDelay:                  l.MinBaseDelayMs.Duration(),
		MaxRetriesCap:                 l.MaxRetriesCap,
		MaxHistoryBytes:               l.MaxHistoryBytes,
	}
}
