package session_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/retrybudget"
	"github.com/agentd/agentd/internal/session"
)

// memBudget gives the session engine the in-memory retry budget.
type memBudget struct{ *retrybudget.Memory }

func (b memBudget) Retry(ctx context.Context, model string) bool {
	d, _ := b.Memory.Retry(ctx, model)
	return d.Allowed
}

// budgetManager has the simulated providers of fallbackManager (chain
// sim/echo → sim/backup → alt/echo, only with fallback on) and a retry
// budget.
func budgetManager(t *testing.T, b retry.Budget, fallback bool) (*session.Manager, *retrybudget.Memory, *recorder) {
	t.Helper()
	settings := retry.DefaultSettings()
	settings.ModelFallback = fallback
	settings.FallbackChains = map[string][]string{"default": {"sim/backup", "alt/echo"}}
	budget := retrybudget.NewMemory(b)
	simRec := &recorder{Provider: sim.New(sim.Options{})}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{
			{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"}, Client: simRec},
			{Name: "alt", Kind: provider.KindSimulated, Models: []string{"echo"}, Client: sim.New(sim.Options{})},
		},
		Retry:     settings,
		Cooldowns: cooldown.NewMemory(nil),
		Budget:    memBudget{budget},
		Rand:      func() float64 { return 1 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, budget, simRec
}

const always529 = "[[faults: 529,529,529,529,529,529,529,529,529,529,529,529]]"

// A budget of 4 tokens allows two retries (4 → 3 → 2, and 2 is not above
// the threshold): the third is refused, and the chain ends there with the
// final error naming the budget, the model and the class.
func TestBudgetRefusalEndsTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, budget, simRec := budgetManager(t, retry.Budget{MaxTokens: 4, TokenRatio: 0.1}, false)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, always529)
		want := "agent_start,message_start,message_end,agent_end,auto_retry_start," +
			"agent_start,message_start,message_end,agent_end,auto_retry_start," +
			"agent_start,message_start,message_end,agent_end,auto_retry_end,prompt_end"
		if got := kinds(evs); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
		final := "retry budget exhausted for sim/echo (transient). Original error: 529 overloaded_error: Overloaded"
		if end := only(evs, session.EventAutoRetryEnd)[0]; end.Success || end.Attempt != 3 || end.FinalError != final {
			t.Fatalf("auto_retry_end = %+v", end)
		}
		if pe := last(evs); pe.Outcome != session.OutcomeFailed || pe.Error != final {
			t.Fatalf("prompt_end = %+v", pe)
		}
		if n := len(simRec.requests()); n != 3 {
			t.Fatalf("%d calls, want 3", n)
		}
		// The next session's first failure is refused at once: the budget
		// is the model's, not the session's.
		s2 := create(t, m, session.RetryOverrides{})
		evs = prompt(t, m, s2, "[[faults: 503,ok]]")
		if n := len(only(evs, session.EventAutoRetryStart)); n != 0 || last(evs).Outcome != session.OutcomeFailed ||
			!strings.HasPrefix(last(evs).Error, "retry budget exhausted for sim/echo (transient)") {
			t.Fatalf("second session: %s %+v", kinds(evs), last(evs))
		}
		// Successes refill it: 10 at 0.1 buy a token, and a retry again.
		for range 10 {
			prompt(t, m, s2, "fine")
		}
		if l, _ := budget.Levels(context.Background()); l["sim/echo"] != 3 {
			t.Fatalf("levels = %v", l)
		}
		evs = prompt(t, m, s2, "[[faults: 503,ok]]")
		if last(evs).Outcome != session.OutcomeCompleted || len(only(evs, session.EventAutoRetryStart)) != 1 {
			t.Fatalf("after the refill: %s %+v", kinds(evs), last(evs))
		}
	})
}

// A fallback is not a retry of the same target: it spends nothing.
func TestBudgetFallbackDoesNotSpend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, budget, _ := budgetManager(t, retry.Budget{MaxTokens: 4, TokenRatio: 0.1}, true)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: 529,ok]]")
		if last(evs).Outcome != session.OutcomeCompleted || len(only(evs, session.EventRetryFallbackApplied)) != 1 {
			t.Fatalf("events %s", kinds(evs))
		}
		if l, _ := budget.Levels(context.Background()); len(l) != 0 {
			t.Fatalf("a fallback spent from the budget: %v", l)
		}
	})
}

// A stale Responses replay is a repair retried at once: it spends nothing.
func TestBudgetStaleReplayDoesNotSpend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, budget, _ := budgetManager(t, retry.Budget{MaxTokens: 2, TokenRatio: 0.1}, false)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: stale,ok]]")
		if last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("events %s, %+v", kinds(evs), last(evs))
		}
		if l, _ := budget.Levels(context.Background()); len(l) != 0 {
			t.Fatalf("a stale replay spent from the budget: %v", l)
		}
	})
}

// A storm: 200 sessions at once against a model that always fails, with a
// budget of 20 tokens. The upstream sees each prompt's first call and the
// 10 retries the budget allows, not 200 × 11 calls; every prompt ends.
func TestBudgetBoundsAStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, simRec := budgetManager(t, retry.Budget{MaxTokens: 20, TokenRatio: 0.1}, false)
		const n = 200
		var wg sync.WaitGroup
		var mu sync.Mutex
		outcomes := map[string]int{}
		for range n {
			s := create(t, m, session.RetryOverrides{})
			wg.Go(func() {
				evs := prompt(t, m, s, always529)
				mu.Lock()
				outcomes[last(evs).Outcome]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if outcomes[session.OutcomeFailed] != n {
			t.Fatalf("outcomes = %v", outcomes)
		}
		if calls := len(simRec.requests()); calls != n+10 {
			t.Fatalf("%d upstream calls, want %d (one per prompt, 10 retries)", calls, n+10)
		}
	})
}
