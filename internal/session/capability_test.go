package session_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

func no() *bool { b := false; return &b }

// catalogManager is fallbackManager (chain sim/echo → sim/backup →
// alt/echo) with a model catalog.
func catalogManager(t *testing.T, overflow bool, echo, backup, alt provider.ModelInfo) (*session.Manager, *recorder, *recorder) {
	t.Helper()
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"sim/backup", "alt/echo"}}
	settings.OverflowFallback = overflow
	echo.Name, backup.Name, alt.Name = "echo", "backup", "echo"
	simRec := &recorder{Provider: sim.New(sim.Options{})}
	altRec := &recorder{Provider: sim.New(sim.Options{})}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{
			{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"}, Client: simRec,
				Catalog: map[string]provider.ModelInfo{"echo": echo, "backup": backup}},
			{Name: "alt", Kind: provider.KindSimulated, Models: []string{"echo"}, Client: altRec,
				Catalog: map[string]provider.ModelInfo{"echo": alt}},
		},
		Retry:     settings,
		Cooldowns: cooldown.NewMemory(nil),
		Rand:      func() float64 { return 1 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, simRec, altRec
}

// A context overflow with retry.overflow_fallback moves the session to the
// chain's next model with a larger context window (sim/backup's is
// smaller: skipped), at once and without a retry chain, and the session
// stays there.
func TestOverflowFallbackMovesToALargerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, simRec, altRec := catalogManager(t, true,
			provider.ModelInfo{ContextWindow: 8000}, provider.ModelInfo{ContextWindow: 4000}, provider.ModelInfo{ContextWindow: 200000})
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "a long story [[faults: overflow]]")
		want := "agent_start,message_start,message_end,agent_end,model_change," +
			"agent_start,message_start,message_update,message_end,agent_end,prompt_end"
		if got := kinds(evs); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
		if mc := only(evs, session.EventModelChange)[0]; mc.From != "sim/echo" || mc.To != "alt/echo" || mc.Reason != session.ChangeOverflow {
			t.Fatalf("model_change = %+v", mc)
		}
		if last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", last(evs))
		}
		if len(simRec.requests()) != 1 || len(altRec.requests()) != 1 {
			t.Fatalf("calls: sim %v, alt %v", models(simRec.requests()), models(altRec.requests()))
		}
		// The failed call is not in the context sent to the larger model.
		for _, msg := range altRec.requests()[0].Messages {
			if msg.StopReason == provider.StopError {
				t.Fatalf("the overflowed call was sent again: %+v", msg)
			}
		}
		// Remembered: the next prompt stays on the larger model.
		evs = prompt(t, m, s, "and more")
		if n := len(only(evs, session.EventModelChange)); n != 0 || s.State().Model != "alt/echo" || len(altRec.requests()) != 2 {
			t.Fatalf("second prompt: %s on %s", kinds(evs), s.State().Model)
		}
		entries, _, _ := s.Messages(context.Background(), 0, 100)
		found := false
		for _, e := range entries {
			if e.ModelChange != nil && e.ModelChange.Reason == session.ChangeOverflow && e.ModelChange.To == "alt/echo" {
				found = true
			}
		}
		if !found {
			t.Fatal("the overflow model change is not in the history")
		}
	})
}

// Without a larger window in the chain, or with overflow_fallback off, or
// without a known window for the current model, the overflow ends the
// prompt as before: context_overflow, and no other call.
func TestOverflowWithoutALargerModel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		overflow bool
		echo     int
	}{
		{"no larger window", true, 500000},
		{"overflow_fallback off", false, 8000},
		{"current window unknown", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, simRec, altRec := catalogManager(t, tc.overflow,
					provider.ModelInfo{ContextWindow: tc.echo}, provider.ModelInfo{ContextWindow: 4000}, provider.ModelInfo{ContextWindow: 200000})
				s := create(t, m, session.RetryOverrides{})
				evs := prompt(t, m, s, "[[faults: overflow]]")
				want := "agent_start,message_start,message_end,agent_end,context_overflow,prompt_end"
				if got := kinds(evs); got != want || last(evs).Outcome != session.OutcomeFailed {
					t.Fatalf("events:\n got %s\nwant %s", got, want)
				}
				if len(simRec.requests()) != 1 || len(altRec.requests()) != 0 {
					t.Fatalf("calls: sim %v, alt %v", models(simRec.requests()), models(altRec.requests()))
				}
			})
		})
	}
}

// Fallback skips the candidates that cannot serve the session: no tools
// for a session with tools, no thinking for a prompt that asks for it, a
// context window smaller than the context.
func TestFallbackSkipsIncapableModels(t *testing.T) {
	for _, tc := range []struct {
		name   string
		backup provider.ModelInfo
		params session.CreateParams
		text   string
	}{
		{"no tools", provider.ModelInfo{SupportsTools: no()},
			session.CreateParams{Tools: []provider.Tool{{Name: "get_weather"}}}, "[[faults: 529,ok]]"},
		{"no thinking", provider.ModelInfo{SupportsThinking: no()},
			session.CreateParams{Params: provider.Params{Thinking: &provider.Thinking{BudgetTokens: 1024}}}, "[[faults: 529,ok]]"},
		{"window smaller than the context", provider.ModelInfo{ContextWindow: 10},
			session.CreateParams{SystemPrompt: strings.Repeat("You are a careful assistant. ", 20)}, "[[faults: 529,ok]]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, simRec, altRec := catalogManager(t, false, provider.ModelInfo{}, tc.backup, provider.ModelInfo{})
				p := tc.params
				p.Model = "sim/echo"
				s, err := m.Create(context.Background(), "t", p)
				if err != nil {
					t.Fatal(err)
				}
				evs := prompt(t, m, s, tc.text)
				fa := only(evs, session.EventRetryFallbackApplied)
				if len(fa) != 1 || fa[0].To != "alt/echo" || last(evs).Outcome != session.OutcomeCompleted {
					t.Fatalf("fallback %+v in %s", fa, kinds(evs))
				}
				if got := models(simRec.requests()); len(got) != 1 || got[0] != "echo" || len(altRec.requests()) != 1 {
					t.Fatalf("calls: sim %v, alt %d", got, len(altRec.requests()))
				}
			})
		})
	}
	// A capable backup is not skipped.
	synctest.Test(t, func(t *testing.T) {
		m, simRec, _ := catalogManager(t, false, provider.ModelInfo{}, provider.ModelInfo{ContextWindow: 100000}, provider.ModelInfo{})
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: 529,ok]]")
		if fa := only(evs, session.EventRetryFallbackApplied); len(fa) != 1 || fa[0].To != "sim/backup" || len(simRec.requests()) != 2 {
			t.Fatalf("fallback %+v", fa)
		}
	})
}
