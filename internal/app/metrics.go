package app

import (
	"slices"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/metrics"
)

// MetricsOptions derives the closed label sets from a configuration: its
// providers, their models and the fallback chains' models and roles.
func MetricsOptions(cfg *config.Config) metrics.Options {
	var o metrics.Options
	for _, p := range cfg.Providers {
		o.Providers = append(o.Providers, p.Name)
		for _, m := range p.ModelNames() {
			o.Models = append(o.Models, p.Name+"/"+m)
		}
		if len(p.Models) == 0 {
			o.OpenProviders = append(o.OpenProviders, p.Name)
		}
	}
	for role, chain := range cfg.Retry.FallbackChains {
		o.Roles = append(o.Roles, role)
		for _, m := range chain {
			if !slices.Contains(o.Models, m) {
				o.Models = append(o.Models, m)
			}
		}
	}
	slices.Sort(o.Roles)
	o.Backends = []string{cfg.Store.Backend}
	if b, err := cfg.RetryBudget(); err == nil && b.Enabled() {
		o.Budget = float64(b.MaxTokens)
	}
	return o
}
