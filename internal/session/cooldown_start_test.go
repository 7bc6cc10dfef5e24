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

// cooldownManager is fallbackManager with the cooldown registry at hand:
// the chain default is sim/echo → sim/backup → alt/echo.
func cooldownManager(t *testing.T, mutate func(*retry.Settings)) (*session.Manager, *cooldown.Memory, *recorder, *recorder) {
	t.Helper()
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"sim/backup", "alt/echo"}}
	if mutate != nil {
		mutate(&settings)
	}
	reg := cooldown.NewMemory(nil)
	simRec := &recorder{Provider: sim.New(sim.Options{})}
	altRec := &recorder{Provider: sim.New(sim.Options{})}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{
			{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"}, Client: simRec},
			{Name: "alt", Kind: provider.KindSimulated, Models: []string{"echo"}, Client: altRec},
		},
		Retry:     settings,
		Cooldowns: reg,
		Rand:      func() float64 { return 1 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, reg, simRec, altRec
}

func cool(t *testing.T, reg *cooldown.Memory, d time.Duration, models ...string) {
	t.Helper()
	for _, model := range models {
		if err := reg.Suppress(context.Background(), model, time.Now().Add(d)); err != nil {
			t.Fatal(err)
		}
	}
}

// A new session whose primary is cooling down starts on the chain's first
// model that is not (model_change, reason cooldown) and goes back to the
// primary once the cooldown has expired.
func TestPromptStartsOffAModelCoolingDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, reg, simRec, _ := cooldownManager(t, nil)
		cool(t, reg, time.Minute, "sim/echo")
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "hi")
		want := "model_change,agent_start,message_start,message_update,message_end,agent_end,prompt_end"
		if got := kinds(evs); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
		if mc := evs[0]; mc.From != "sim/echo" || mc.To != "sim/backup" || mc.Reason != session.ChangeCooldown {
			t.Fatalf("model_change = %+v", mc)
		}
		if got := models(simRec.requests()); len(got) != 1 || got[0] != "backup" {
			t.Fatalf("calls went to %v", got)
		}
		if ms := only(evs, session.EventMessageStart)[0]; ms.Model != "sim/backup" {
			t.Fatalf("message_start = %+v", ms)
		}
		if st := s.State(); st.Model != "sim/backup" || st.PrimaryModel != "sim/echo" || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("state = %+v, prompt_end %+v", st, last(evs))
		}

		// During the cooldown the session stays on the fallback.
		time.Sleep(30 * time.Second)
		evs = prompt(t, m, s, "second")
		if n := len(only(evs, session.EventModelChange)); n != 0 || s.State().Model != "sim/backup" {
			t.Fatalf("changed model during the cooldown: %s", kinds(evs))
		}
		// After it, the next prompt goes back to the primary.
		time.Sleep(time.Minute)
		evs = prompt(t, m, s, "third")
		mc := only(evs, session.EventModelChange)
		if len(mc) != 1 || mc[0].From != "sim/backup" || mc[0].To != "sim/echo" || mc[0].Reason != session.ChangeRevert {
			t.Fatalf("revert: %s %+v", kinds(evs), mc)
		}
		reqs := simRec.requests()
		if got := models(reqs); len(got) != 3 || got[2] != "echo" {
			t.Fatalf("calls went to %v", got)
		}
		entries, _, _ := s.Messages(context.Background(), 0, 100)
		var changes []string
		for _, e := range entries {
			if e.ModelChange != nil {
				changes = append(changes, e.ModelChange.Reason+":"+e.ModelChange.To)
			}
		}
		if len(changes) != 2 || changes[0] != "cooldown:sim/backup" || changes[1] != "revert:sim/echo" {
			t.Fatalf("history model changes = %v", changes)
		}
	})
}

// A session that already ran starts its next prompt off its model when that
// one began cooling down meanwhile (another session's failure), skipping
// every model of the chain cooling down too.
func TestNextPromptStartsOffAModelCoolingDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, reg, simRec, altRec := cooldownManager(t, nil)
		s := create(t, m, session.RetryOverrides{})
		prompt(t, m, s, "first")
		cool(t, reg, time.Minute, "sim/echo", "sim/backup")
		evs := prompt(t, m, s, "second")
		mc := only(evs, session.EventModelChange)
		if len(mc) != 1 || mc[0].To != "alt/echo" || mc[0].Reason != session.ChangeCooldown {
			t.Fatalf("model_change = %+v in %s", mc, kinds(evs))
		}
		if len(simRec.requests()) != 1 || len(altRec.requests()) != 1 {
			t.Fatalf("calls: sim %v, alt %v", models(simRec.requests()), models(altRec.requests()))
		}
	})
}

// Every model of the chain cooling down, or model fallback disabled, or no
// chain: the prompt calls the primary, as without a cooldown.
func TestPromptOnPrimaryWhenNoModelIsFree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*retry.Settings)
		cooled []string
	}{
		{"all cooling", nil, []string{"sim/echo", "sim/backup", "alt/echo"}},
		{"fallback disabled", func(s *retry.Settings) { s.ModelFallback = false }, []string{"sim/echo"}},
		{"no chain", func(s *retry.Settings) { s.FallbackChains = nil }, []string{"sim/echo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, reg, simRec, altRec := cooldownManager(t, tc.mutate)
				cool(t, reg, time.Minute, tc.cooled...)
				s := create(t, m, session.RetryOverrides{})
				evs := prompt(t, m, s, "hi")
				if n := len(only(evs, session.EventModelChange)); n != 0 {
					t.Fatalf("model changed: %s", kinds(evs))
				}
				if got := models(simRec.requests()); len(got) != 1 || got[0] != "echo" || len(altRec.requests()) != 0 {
					t.Fatalf("calls went to %v (alt %d)", got, len(altRec.requests()))
				}
				if st := s.State(); st.Model != "sim/echo" || last(evs).Outcome != session.OutcomeCompleted {
					t.Fatalf("state = %+v", st)
				}
			})
		})
	}
}

// Fallback disabled for the session alone (its retry overrides): the
// primary too.
func TestPromptOnPrimaryWhenSessionDisablesFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, reg, simRec, _ := cooldownManager(t, nil)
		cool(t, reg, time.Minute, "sim/echo")
		s := create(t, m, session.RetryOverrides{ModelFallback: boolp(false)})
		evs := prompt(t, m, s, "hi")
		if n := len(only(evs, session.EventModelChange)); n != 0 || models(simRec.requests())[0] != "echo" {
			t.Fatalf("events %s, calls %v", kinds(evs), models(simRec.requests()))
		}
	})
}
