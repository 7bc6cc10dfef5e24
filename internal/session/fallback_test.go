package session_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// fallbackManager has two simulated providers (sim and alt) and the chain
// default: sim/echo → sim/backup → alt/echo.
func fallbackManager(t *testing.T, mutate func(*retry.Settings)) (*session.Manager, *recorder, *recorder) {
	t.Helper()
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"sim/backup", "alt/echo"}}
	if mutate != nil {
		mutate(&settings)
	}
	simRec := &recorder{Provider: sim.New(sim.Options{})}
	altRec := &recorder{Provider: sim.New(sim.Options{})}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{
			{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"}, Client: simRec},
			{Name: "alt", Kind: provider.KindSimulated, Models: []string{"echo"}, Client: altRec},
		},
		Retry:     settings,
		Cooldowns: cooldown.NewMemory(nil),
		Rand:      func() float64 { return 1 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, simRec, altRec
}

func models(reqs []provider.Request) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.Model
	}
	return out
}

func TestFallbackAppliedSucceedsAndReverts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, simRec, _ := fallbackManager(t, nil)
		s := create(t, m, session.RetryOverrides{})
		start := time.Now()
		evs := prompt(t, m, s, "hi [[faults: 529,ok]]")
		if time.Since(start) != 0 {
			t.Fatalf("a fallback waited %v; it must retry at once", time.Since(start))
		}
		want := "agent_start,message_start,message_end,agent_end,retry_fallback_applied,model_change,auto_retry_start," +
			"agent_start,message_start,message_update,message_end,retry_fallback_succeeded,auto_retry_end,agent_end,prompt_end"
		if got := kinds(evs); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
		fa := only(evs, session.EventRetryFallbackApplied)[0]
		if fa.From != "sim/echo" || fa.To != "sim/backup" || fa.Role != "default" {
			t.Fatalf("retry_fallback_applied = %+v", fa)
		}
		if st := only(evs, session.EventAutoRetryStart)[0]; st.Delay != 0 || st.DelaySource != "switch" {
			t.Fatalf("auto_retry_start = %+v", st)
		}
		if fs := only(evs, session.EventRetryFallbackSucceeded)[0]; fs.Model != "sim/backup" || fs.Role != "default" {
			t.Fatalf("retry_fallback_succeeded = %+v", fs)
		}
		if got := models(simRec.requests()); len(got) != 2 || got[0] != "echo" || got[1] != "backup" {
			t.Fatalf("calls went to %v", got)
		}
		st := s.State()
		if st.Model != "sim/backup" || st.PrimaryModel != "sim/echo" {
			t.Fatalf("state = %+v", st)
		}

		// While the primary cools down (an overloaded model: 60 s without a
		// hint), prompts stay on the fallback.
		time.Sleep(30 * time.Second)
		evs = prompt(t, m, s, "second")
		if n := len(only(evs, session.EventModelChange)); n != 0 || s.State().Model != "sim/backup" {
			t.Fatalf("reverted during the cooldown: %s", kinds(evs))
		}
		// Once it has expired, the next prompt goes back to the primary.
		time.Sleep(time.Minute)
		evs = prompt(t, m, s, "third")
		mc := only(evs, session.EventModelChange)
		if len(mc) != 1 || mc[0].From != "sim/backup" || mc[0].To != "sim/echo" || mc[0].Reason != "revert" {
			t.Fatalf("revert: %s %+v", kinds(evs), mc)
		}
		reqs := simRec.requests()
		if last := reqs[len(reqs)-1]; last.Model != "echo" {
			t.Fatalf("third prompt went to %s", last.Model)
		}
		// The history holds both model changes.
		entries, _, _ := s.Messages(context.Background(), 0, 100)
		var changes []string
		for _, e := range entries {
			if e.ModelChange != nil {
				changes = append(changes, e.ModelChange.Reason+":"+e.ModelChange.To)
			}
		}
		if len(changes) != 2 || changes[0] != "fallback:sim/backup" || changes[1] != "revert:sim/echo" {
			t.Fatalf("history model changes = %v", changes)
		}
	})
}

func TestFallbackProviderHintSetsCooldown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, _ := fallbackManager(t, nil)
		s := create(t, m, session.RetryOverrides{})
		prompt(t, m, s, "[[faults: 429:retry-after-ms=200,ok]]")
		if s.State().Model != "sim/backup" {
			t.Fatalf("model = %s", s.State().Model)
		}
		prompt(t, m, s, "still cooling")
		if s.State().Model != "sim/backup" {
			t.Fatal("reverted before the hint's 200ms")
		}
		time.Sleep(240 * time.Millisecond)
		prompt(t, m, s, "back")
		if s.State().Model != "sim/echo" {
			t.Fatalf("model after the cooldown = %s", s.State().Model)
		}
	})
}

func TestFallbackRevertPolicyNever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, _ := fallbackManager(t, func(s *retry.Settings) { s.FallbackRevertPolicy = retry.RevertNever })
		s := create(t, m, session.RetryOverrides{})
		prompt(t, m, s, "[[faults: 503,ok]]")
		time.Sleep(time.Hour)
		evs := prompt(t, m, s, "later")
		if s.State().Model != "sim/backup" || len(only(evs, session.EventModelChange)) != 0 {
			t.Fatalf("policy never reverted: %s", kinds(evs))
		}
	})
}

func TestFallbackWalksTheChainAcrossProviders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, simRec, altRec := fallbackManager(t, nil)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: 529,503,ok]]")
		fa := only(evs, session.EventRetryFallbackApplied)
		if len(fa) != 2 || fa[1].From != "sim/backup" || fa[1].To != "alt/echo" {
			t.Fatalf("fallbacks = %+v", fa)
		}
		if len(simRec.requests()) != 2 || len(altRec.requests()) != 1 {
			t.Fatalf("calls: sim %v, alt %v", models(simRec.requests()), models(altRec.requests()))
		}
		// The other provider got the conversation in its own call.
		if r := altRec.requests()[0]; r.Model != "echo" || len(r.Messages) != 1 {
			t.Fatalf("alt request = %+v", r)
		}
		if last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", last(evs))
		}
	})
}

func TestFallbackSkipsModelsCoolingDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, _ := fallbackManager(t, nil)
		// One session's failure of sim/backup cools it down for every session.
		other, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/backup"})
		if err != nil {
			t.Fatal(err)
		}
		prompt(t, m, other, "[[faults: 529,ok]]") // backup → alt
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: 529,ok]]")
		fa := only(evs, session.EventRetryFallbackApplied)
		if len(fa) != 1 || fa[0].To != "alt/echo" {
			t.Fatalf("fallback skipped nothing: %+v", fa)
		}
	})
}

func TestFallbackExhaustedBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, _ := fallbackManager(t, nil)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: 529,529,529,ok]]")
		st := only(evs, session.EventAutoRetryStart)
		// Two switches at once, then the chain is exhausted: local backoff.
		if len(st) != 3 || st[0].Delay != 0 || st[1].Delay != 0 || st[2].Delay != 2*time.Second || st[2].DelaySource != "estimate" {
			t.Fatalf("auto_retry_start = %+v", st)
		}
	})
}

func TestRefusalFallbackIsPinned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, _ := fallbackManager(t, nil)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: refusal,ok]]")
		if fa := only(evs, session.EventRetryFallbackApplied); len(fa) != 1 || fa[0].To != "sim/backup" {
			t.Fatalf("refusal fallback: %s", kinds(evs))
		}
		if last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", last(evs))
		}
		// No cooldown for the primary, but the fallback is pinned: no revert.
		time.Sleep(time.Hour)
		evs = prompt(t, m, s, "later")
		if s.State().Model != "sim/backup" || len(only(evs, session.EventModelChange)) != 0 {
			t.Fatalf("pinned fallback reverted: %s", kinds(evs))
		}
	})
}

func TestRefusalCountsAgainstMaxRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, altRec := fallbackManager(t, nil)
		s := create(t, m, session.RetryOverrides{MaxRetries: intp(1)})
		evs := prompt(t, m, s, "[[faults: 503,refusal,ok]]")
		end := only(evs, session.EventAutoRetryEnd)
		if len(end) != 1 || end[0].Success || end[0].Attempt != 1 || end[0].FinalError != "Refusal (cyber): Classifier declined this turn." {
			t.Fatalf("auto_retry_end = %+v (%s)", end, kinds(evs))
		}
		if n := len(altRec.requests()); n != 0 {
			t.Fatalf("fallback #2 was called %d times", n)
		}
	})
}

func TestNoFallbackForReasonlessAbortsOrWhenDisabled(t *testing.T) {
	for name, tc := range map[string]struct {
		script    string
		overrides session.RetryOverrides
	}{
		"reasonless abort": {"[[faults: abort,ok]]", session.RetryOverrides{}},
		"disabled":         {"[[faults: 529,ok]]", session.RetryOverrides{ModelFallback: boolp(false)}},
		"stale replay":     {"[[faults: stale,ok]]", session.RetryOverrides{}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, _, _ := fallbackManager(t, nil)
				s := create(t, m, tc.overrides)
				evs := prompt(t, m, s, tc.script)
				if len(only(evs, session.EventRetryFallbackApplied)) != 0 || s.State().Model != "sim/echo" {
					t.Fatalf("fell back: %s", kinds(evs))
				}
				if len(only(evs, session.EventAutoRetryStart)) != 1 || last(evs).Outcome != session.OutcomeCompleted {
					t.Fatalf("events = %s", kinds(evs))
				}
			})
		})
	}
}

func TestRoleWithoutChainInheritsDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, _ := fallbackManager(t, func(s *retry.Settings) {
			s.FallbackChains["coder"] = []string{"alt/echo"}
		})
		s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo", Role: "smol"})
		if err != nil {
			t.Fatal(err)
		}
		evs := prompt(t, m, s, "[[faults: 529,ok]]")
		if fa := only(evs, session.EventRetryFallbackApplied); len(fa) != 1 || fa[0].To != "sim/backup" || fa[0].Role != "smol" {
			t.Fatalf("fallbacks = %+v", fa)
		}
		// Past sim/echo's cooldown: the next session starts on it.
		time.Sleep(2 * time.Minute)
		c, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo", Role: "coder"})
		if err != nil {
			t.Fatal(err)
		}
		evs = prompt(t, m, c, "[[faults: 529,ok]]")
		if fa := only(evs, session.EventRetryFallbackApplied); len(fa) != 1 || fa[0].To != "alt/echo" {
			t.Fatalf("coder fallbacks = %+v", fa)
		}
	})
}
