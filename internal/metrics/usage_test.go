package metrics_test

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// A scripted chain — a refusal on sim/echo, the fallback to sim/backup
// answering, then a second prompt on the pinned fallback — leaves exact
// token, cost and waste counters.
func TestUsageMetricsAfterScriptedChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		mx := metrics.New(reg, metrics.Options{Providers: []string{"sim"}, Models: []string{"sim/echo", "sim/backup"}})
		settings := retry.DefaultSettings()
		settings.FallbackChains = map[string][]string{"default": {"sim/backup"}}
		m := session.NewManager(session.Options{
			Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"},
				Catalog: map[string]provider.ModelInfo{
					"echo":   {Name: "echo", Price: &provider.Price{InputPerMTok: 1, OutputPerMTok: 4}},
					"backup": {Name: "backup", Price: &provider.Price{InputPerMTok: 2, OutputPerMTok: 10, CacheReadPerMTok: 0.5, CacheWritePerMTok: 2.5}},
				},
				Client: sim.New(sim.Options{})}},
			Retry:    settings,
			Observer: mx,
			Rand:     func() float64 { return 0.5 },
		})
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m.Close(ctx)
		}()
		s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		run := func(text string) {
			_, sub, err := s.Prompt(context.Background(), text)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			for {
				e, err := sub.Next(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if e.Type == session.EventPromptEnd {
					return
				}
			}
		}
		// Call 1 (echo, refused): 2 input. Call 2 (backup): 2 input, 3 output
		// ("echo: (empty prompt)").
		run("[[faults: refusal,ok]]")
		// Call 3 (backup): the first prompt's message read from the cache
		// (2), the answer to it written (3: the call before sent only the
		// prompt), "again" input (1), "echo: again" output (2).
		run("again")

		tokens := func(model, kind string) float64 {
			return testutil.ToFloat64(mx.Tokens.WithLabelValues("sim", model, kind))
		}
		for _, c := range []struct {
			model, kind string
			want        float64
		}{
			{"sim/echo", metrics.TokensInput, 2}, {"sim/echo", metrics.TokensOutput, 0},
			{"sim/backup", metrics.TokensInput, 3}, {"sim/backup", metrics.TokensOutput, 5},
			{"sim/backup", metrics.TokensCacheRead, 2}, {"sim/backup", metrics.TokensCacheWrite, 3},
			{"sim/backup", metrics.TokensReasoning, 0}, {metrics.Other, metrics.TokensInput, 0},
		} {
			if got := tokens(c.model, c.kind); got != c.want {
				t.Errorf("agentd_tokens_total{model=%q,kind=%q} = %v, want %v", c.model, c.kind, got, c.want)
			}
		}
		// echo: 2 × $1; backup: 3 × $2 + 5 × $10 + 2 × $0.5 + 3 × $2.5 (per million).
		for model, want := range map[string]float64{"sim/echo": 2e-6, "sim/backup": 64.5e-6} {
			if got := testutil.ToFloat64(mx.Cost.WithLabelValues("sim", model)); math.Abs(got-want) > 1e-15 {
				t.Errorf("agentd_cost_usd_total{model=%q} = %v, want %v", model, got, want)
			}
		}
		for model, want := range map[string]float64{"sim/echo": 2, "sim/backup": 0} {
			if got := testutil.ToFloat64(mx.RetryWastedTokens.WithLabelValues("sim", model)); got != want {
				t.Errorf("agentd_retry_wasted_tokens_total{model=%q} = %v, want %v", model, got, want)
			}
		}
		// Every model of the provider × kind, started at 0, and the one
		// series the check of model "other" above made.
		if n := testutil.CollectAndCount(mx.Tokens); n != 2*len(metrics.TokenKinds)+1 {
			mfs, _ := reg.Gather()
			var series []string
			for _, mf := range mfs {
				if mf.GetName() == "agentd_tokens_total" {
					for _, m := range mf.GetMetric() {
						series = append(series, m.String())
					}
				}
			}
			t.Errorf("agentd_tokens_total has %d series, want every model of the provider × kind: %v", n, series)
		}
	})
}

// BenchmarkModelCalled is the metrics' share of a model call, without and
// with usage to count (five token kinds and a cost): what usage accounting
// adds to each call's observer.
//
//	go test -run '^$' -bench ModelCalled -benchmem ./internal/metrics
func BenchmarkModelCalled(b *testing.B) {
	mx := metrics.New(prometheus.NewRegistry(), metrics.Options{Providers: []string{"anthropic"}, Models: []string{"anthropic/claude-sonnet-4-5"}})
	cost := 0.0123
	for _, tc := range []struct {
		name string
		call session.Call
	}{
		{"without-usage", session.Call{Provider: "anthropic", Model: "anthropic/claude-sonnet-4-5", Duration: time.Second, TTFT: time.Millisecond, StopReason: "stop"}},
		{"with-usage", session.Call{Provider: "anthropic", Model: "anthropic/claude-sonnet-4-5", Duration: time.Second, TTFT: time.Millisecond, StopReason: "stop",
			Usage:   provider.Usage{InputTokens: 12, OutputTokens: 400, CacheReadTokens: 24000, CacheWriteTokens: 1800, ReasoningTokens: 300},
			CostUSD: &cost}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mx.ModelCalled(tc.call)
			}
		})
	}
}
