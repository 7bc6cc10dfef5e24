package session_test

import (
	"context"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/retrybudget"
	"github.com/agentd/agentd/internal/session"
)

// Upstream calls per prompt during an outage (every call 529, no backoff
// wait): without a budget each prompt makes 1 + max_retries calls; with
// retry.budget {100, 0.1} the fleet makes 50 retries in all, then one call
// per prompt. Reported as calls/prompt.
func BenchmarkOutageCallsPerPrompt(b *testing.B) {
	for _, bc := range []struct {
		name   string
		budget *retry.Budget
	}{
		{"no_budget", nil},
		{"budget_100_0.1", &retry.Budget{MaxTokens: 100, TokenRatio: 0.1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			settings := retry.DefaultSettings()
			settings.BaseDelay = 0
			rec := &recorder{Provider: sim.New(sim.Options{})}
			opts := session.Options{
				Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo"}, Client: rec}},
				Retry:     settings,
				Rand:      func() float64 { return 1 },
			}
			if bc.budget != nil {
				opts.Budget = memBudget{retrybudget.NewMemory(*bc.budget)}
			}
			m := session.NewManager(opts)
			defer m.Close(context.Background())
			s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo"})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				_, sub, err := s.Prompt(context.Background(), always529)
				if err != nil {
					b.Fatal(err)
				}
				readToPromptEnd(b, sub)
				sub.Close()
			}
			b.ReportMetric(float64(len(rec.requests()))/float64(b.N), "calls/prompt")
		})
	}
}
