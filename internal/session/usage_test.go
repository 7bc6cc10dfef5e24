package session_test

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// pricedManager has the simulated provider with a catalog pricing echo ($1
// in, $4 out per million) and backup ($2 in, $10 out), the chain echo →
// backup, and model tiny unpriced.
func pricedManager(t *testing.T) *session.Manager {
	t.Helper()
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"sim/backup"}}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup", "tiny"},
			Catalog: map[string]provider.ModelInfo{
				"echo":   {Name: "echo", Price: &provider.Price{InputPerMTok: 1, OutputPerMTok: 4, CacheReadPerMTok: 0.1, CacheWritePerMTok: 1.25}},
				"backup": {Name: "backup", Price: &provider.Price{InputPerMTok: 2, OutputPerMTok: 10}},
			},
			Client: simValidator{sim.New(sim.Options{})}}},
		Retry: settings,
		Rand:  func() float64 { return 0.5 },
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	return m
}

func costIs(got *float64, want float64) bool {
	return got != nil && math.Abs(*got-want) < 1e-12
}

func fmtCost(c *float64) any {
	if c == nil {
		return "nil"
	}
	return *c
}

// A refusal that falls back: the refused call's usage is in prompt_end's
// usage and retryUsage, each call priced at its own model's price; the
// history entries and the session's totals carry the same numbers.
func TestUsageThroughRefusalFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := pricedManager(t)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: refusal,ok]]")
		ends := only(evs, session.EventMessageEnd)
		if len(ends) != 2 || ends[1].Model != "sim/backup" {
			t.Fatalf("events %s", kinds(evs))
		}
		// The prompt's two words; the answer "echo: (empty prompt)" is 3.
		refused, answered := provider.Usage{InputTokens: 2}, provider.Usage{InputTokens: 2, OutputTokens: 3}
		if *ends[0].Usage != refused || !costIs(ends[0].CostUSD, 2e-6) {
			t.Errorf("refused message_end: usage %+v cost %v, want %+v and $0.000002", *ends[0].Usage, fmtCost(ends[0].CostUSD), refused)
		}
		// backup: 2 × $2 + 3 × $10 per million.
		if *ends[1].Usage != answered || !costIs(ends[1].CostUSD, 34e-6) {
			t.Errorf("fallback message_end: usage %+v cost %v, want %+v and $0.000034", *ends[1].Usage, fmtCost(ends[1].CostUSD), answered)
		}
		end := last(evs)
		if want := (provider.Usage{InputTokens: 4, OutputTokens: 3}); *end.Usage != want || !costIs(end.CostUSD, 36e-6) {
			t.Errorf("prompt_end usage %+v cost %v, want %+v and $0.000036", *end.Usage, fmtCost(end.CostUSD), want)
		}
		if *end.RetryUsage != refused || !costIs(end.RetryCostUSD, 2e-6) {
			t.Errorf("prompt_end retryUsage %+v cost %v, want %+v and $0.000002", *end.RetryUsage, fmtCost(end.RetryCostUSD), refused)
		}
		entries, _, err := s.Messages(context.Background(), 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var assistant []session.Entry
		for _, e := range entries {
			if e.Message.Role == provider.RoleAssistant {
				assistant = append(assistant, e)
			}
		}
		if len(assistant) != 2 || *assistant[0].Usage != refused || *assistant[1].Usage != answered || !costIs(assistant[1].CostUSD, 34e-6) {
			t.Errorf("history entries %+v", assistant)
		}

		// A second prompt adds to the session's totals; nothing is retried.
		evs = prompt(t, m, s, "again")
		end2 := last(evs)
		if !end2.RetryUsage.IsZero() || end2.RetryCostUSD != nil {
			t.Errorf("second prompt_end retryUsage %+v cost %v, want zero and no cost", *end2.RetryUsage, fmtCost(end2.RetryCostUSD))
		}
		st := s.State()
		total := *end.Usage
		total.Add(*end2.Usage)
		if st.Usage != total || !costIs(st.CostUSD, 36e-6+*end2.CostUSD) {
			t.Errorf("session usage %+v cost %v, want %+v and the prompts' sum", st.Usage, fmtCost(st.CostUSD), total)
		}
	})
}

// What a retry throws away, by cause: a stale replay (an error answer: no
// usage), a call cut off before any output that was billed for its input,
// and for contrast a failure after output that is not retried (its usage
// counts, but nothing was thrown away by a retry).
func TestRetryUsageByCause(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		outcome    string
		calls      int
		wasted     provider.Usage
	}{
		{"stale replay", "[[faults: stale,ok]]", session.OutcomeCompleted, 2, provider.Usage{}},
		{"cut before output", "[[faults: overloaded-stream,ok]]", session.OutcomeCompleted, 2, provider.Usage{InputTokens: 2}},
		// The second attempt reads the first one's prompt from the cache.
		{"two cut before output", "[[faults: overloaded-stream,overloaded-stream,ok]]", session.OutcomeCompleted, 3, provider.Usage{InputTokens: 2, CacheReadTokens: 2}},
		{"cut after output", "hello there [[faults: midstream]]", session.OutcomeFailed, 1, provider.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := pricedManager(t)
				s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/tiny"})
				if err != nil {
					t.Fatal(err)
				}
				evs := prompt(t, m, s, tc.text)
				end := last(evs)
				ends := only(evs, session.EventMessageEnd)
				if end.Outcome != tc.outcome || len(ends) != tc.calls {
					t.Fatalf("outcome %q after %d calls (%s), want %q after %d", end.Outcome, len(ends), kinds(evs), tc.outcome, tc.calls)
				}
				var sum, wasted provider.Usage
				for i, e := range ends {
					sum.Add(*e.Usage)
					if i < len(ends)-1 {
						wasted.Add(*e.Usage)
					}
				}
				if tc.outcome == session.OutcomeFailed {
					wasted = provider.Usage{}
				}
				if *end.Usage != sum || *end.RetryUsage != tc.wasted || wasted != tc.wasted {
					t.Errorf("prompt_end usage %+v retryUsage %+v; want the calls' sum %+v and %+v wasted", *end.Usage, *end.RetryUsage, sum, tc.wasted)
				}
				// sim/tiny has no price: no cost anywhere.
				if end.CostUSD != nil || end.RetryCostUSD != nil || ends[0].CostUSD != nil || s.State().CostUSD != nil {
					t.Errorf("an unpriced model got a cost: %v %v", fmtCost(end.CostUSD), fmtCost(ends[0].CostUSD))
				}
			})
		})
	}
}
