package session_test

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/retrybudget"
	"github.com/agentd/agentd/internal/session"
)

// tenantFaultManager serves sim/echo (chain → sim/backup, with fallback as
// given) with the fleet's shared memories of a failing model, the cooldown
// registry and a retry budget of 4 tokens (two retries), and two
// credentials of sim: the server's srv and tenant A's own a1.
func tenantFaultManager(t *testing.T, fallback bool) (*session.Manager, *cooldown.Memory, *retrybudget.Memory, *recorder) {
	t.Helper()
	return tenantFaultManagerProbing(t, fallback, false)
}

// tenantFaultManagerProbing is tenantFaultManager with, when probing, the
// registry's half-open probes (as agentd runs it).
func tenantFaultManagerProbing(t *testing.T, fallback, probing bool) (*session.Manager, *cooldown.Memory, *retrybudget.Memory, *recorder) {
	t.Helper()
	store := credstore.NewMemory(credstore.MemoryOptions{})
	for _, c := range []credstore.Credential{{ID: "srv", Secret: "sk-srv"}, {ID: "a1", Secret: "sk-a1", Owner: "A"}} {
		c.Provider = "sim"
		if _, err := store.Add(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	settings := retry.DefaultSettings()
	settings.ModelFallback = fallback
	settings.FallbackChains = map[string][]string{"default": {"sim/backup"}}
	reg := cooldown.NewMemory(nil)
	budget := retrybudget.NewMemory(retry.Budget{MaxTokens: 4, TokenRatio: 0.1})
	rec := &recorder{Provider: sim.New(sim.Options{})}
	var cooldowns session.Cooldowns = reg
	if probing {
		cooldowns = registryProber{reg}
	}
	m := session.NewManager(session.Options{
		Providers:   []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"}, Client: rec}},
		Retry:       settings,
		Credentials: store,
		Cooldowns:   cooldowns,
		Budget:      memBudget{budget},
		Rand:        func() float64 { return 1 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, reg, budget, rec
}

func sessionOf(t *testing.T, m *session.Manager, tenant string) *session.Session {
	t.Helper()
	s, err := m.Create(context.Background(), tenant, session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func cooling(t *testing.T, reg *cooldown.Memory, model string) bool {
	t.Helper()
	until, err := reg.SuppressedUntil(context.Background(), model)
	if err != nil {
		t.Fatal(err)
	}
	return !until.IsZero()
}

// A rate limit of a tenant's own key is that tenant's: its session falls
// back as always, and the model cools down for that tenant's sessions
// only (they stay off it for the cooldown, then go back), so the other
// tenants' sessions stay on it. The same rate limit on the server's key
// cools the model down for the sessions on the server's keys
// (TestServerKeysRateLimitSparesOwnKeys), and an overloaded model on
// anyone's key for all, as before.
func TestOwnKeysRateLimitCoolsNoOneElse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, reg, _, rec := tenantFaultManager(t, true)
		a, b := sessionOf(t, m, "A"), sessionOf(t, m, "B")

		evs := prompt(t, m, a, "[[faults: 429,ok]]")
		if fb := only(evs, session.EventRetryFallbackApplied); len(fb) != 1 || fb[0].To != "sim/backup" || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("A after its own key's 429: %s %+v", kinds(evs), last(evs))
		}
		if got := credIDs(rec.requests()); got[0] != "a1" {
			t.Fatalf("A's first call used %v; want its own a1", got)
		}
		if cooling(t, reg, "sim/echo") {
			t.Fatal("sim/echo cools down for every tenant after a rate limit of A's own key")
		}
		evs = prompt(t, m, b, "hi")
		if n := len(only(evs, session.EventModelChange)); n != 0 || b.State().Model != "sim/echo" {
			t.Fatalf("B moved off sim/echo: %s", kinds(evs))
		}
		// A's sessions keep off it for the cooldown (30 s for a rate
		// limit): A's stays on the fallback, a new one starts off it.
		evs = prompt(t, m, a, "again")
		if n := len(only(evs, session.EventModelChange)); n != 0 || a.State().Model != "sim/backup" {
			t.Fatalf("A went back to sim/echo during its key's cooldown: %s", kinds(evs))
		}
		evs = prompt(t, m, sessionOf(t, m, "A"), "hi")
		if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].To != "sim/backup" || mc[0].Reason != session.ChangeCooldown {
			t.Fatalf("A's new session during its key's cooldown: %s", kinds(evs))
		}
		time.Sleep(31 * time.Second)
		evs = prompt(t, m, a, "later")
		if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].To != "sim/echo" || mc[0].Reason != session.ChangeRevert {
			t.Fatalf("A after its key's cooldown: %s", kinds(evs))
		}

		// The server's key: shared, so the fleet learns of it.
		evs = prompt(t, m, b, "[[faults: 429,ok]]")
		if only(evs, session.EventMessageStart)[0].Credential != "srv" || !cooling(t, reg, "sim/echo|server-keys") {
			t.Fatalf("B's 429 on the server's key (%s) did not cool sim/echo on the server's keys", kinds(evs))
		}

		// An overloaded model on A's own key is the model's, not the key's.
		time.Sleep(10 * time.Minute)
		if cooling(t, reg, "sim/echo") {
			t.Fatal("sim/echo still cooling after 10 minutes")
		}
		a2 := sessionOf(t, m, "A")
		evs = prompt(t, m, a2, "[[faults: 529,ok]]")
		if only(evs, session.EventMessageStart)[0].Credential != "a1" || !cooling(t, reg, "sim/echo") {
			t.Fatalf("A's 529 on its own key (%s) did not cool sim/echo", kinds(evs))
		}
	})
}

// A session that probes a model whose cooldown ended, and fails on its
// tenant's own key's rate limit, proves nothing of the model: the probe is
// released, not failed, and the next session calls the model.
func TestOwnKeysRateLimitReleasesTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, reg, _, _ := tenantFaultManager(t, true)
		cool(t, reg, time.Minute, "sim/echo")
		time.Sleep(time.Minute + time.Second)
		a, b := sessionOf(t, m, "A"), sessionOf(t, m, "B")
		evs := prompt(t, m, a, "[[faults: 429,ok]]")
		if ms := only(evs, session.EventMessageStart); ms[0].Model != "sim/echo" || ms[0].Credential != "a1" {
			t.Fatalf("A's first call %+v; want the probe of sim/echo on a1", ms[0])
		}
		if cooling(t, reg, "sim/echo") {
			t.Fatal("A's own key's rate limit failed the probe: sim/echo cools again")
		}
		evs = prompt(t, m, b, "hi")
		if n := len(only(evs, session.EventModelChange)); n != 0 || only(evs, session.EventMessageStart)[0].Model != "sim/echo" {
			t.Fatalf("B after A's released probe: %s", kinds(evs))
		}
	})
}

// Retries after a rate limit of a tenant's own key spend nothing of the
// model's shared retry budget (its bound is the tenant's own account's
// limit): the other tenants keep their retries.
func TestOwnKeysRateLimitSpendsNoSharedBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, budget, _ := tenantFaultManager(t, false)
		a, b := sessionOf(t, m, "A"), sessionOf(t, m, "B")
		evs := prompt(t, m, a, "[[faults: 429,429,429,429,ok]]")
		if n := len(only(evs, session.EventAutoRetryStart)); n != 4 || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("A's retries on its own key: %s %+v", kinds(evs), last(evs))
		}
		if l, _ := budget.Levels(context.Background()); l["sim/echo"] != 0 && l["sim/echo"] != 4 {
			t.Fatalf("budget levels = %v; want sim/echo untouched", l)
		}
		evs = prompt(t, m, b, "[[faults: 529,529,ok]]")
		if n := len(only(evs, session.EventAutoRetryStart)); n != 2 || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("B's retries after A's: %s %+v", kinds(evs), last(evs))
		}
		// B's two retries spent two tokens and its success credited 0.1:
		// A's four spent none.
		if l, _ := budget.Levels(context.Background()); math.Abs(l["sim/echo"]-2.1) > 1e-9 {
			t.Fatalf("budget levels = %v; want sim/echo at 2.1", l)
		}
	})
}

// A rate limit of one of the server's keys is the server's keys': the
// sessions that call the model with them keep off it for the cooldown, a
// new one starts off it, and the sessions whose last call used their
// tenant's own key stay on it (a first prompt, not knowing which key it
// will draw, keeps off it too, and goes back once its call has used its
// own key). The model's own cooldown is not touched: a session on its own
// key meets nothing it should heed.
func TestServerKeysRateLimitSparesOwnKeys(t *testing.T) {
	for _, probing := range []bool{false, true} {
		t.Run(map[bool]string{false: "registry", true: "probing registry"}[probing], func(t *testing.T) {
			serverKeysRateLimitSparesOwnKeys(t, probing)
		})
	}
}

func serverKeysRateLimitSparesOwnKeys(t *testing.T, probing bool) {
	synctest.Test(t, func(t *testing.T) {
		m, reg, _, rec := tenantFaultManagerProbing(t, true, probing)
		a, b := sessionOf(t, m, "A"), sessionOf(t, m, "B")
		prompt(t, m, a, "hi")

		evs := prompt(t, m, b, "[[faults: 429,ok]]")
		if fb := only(evs, session.EventRetryFallbackApplied); len(fb) != 1 || fb[0].To != "sim/backup" || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("B after the server key's 429: %s %+v", kinds(evs), last(evs))
		}
		if cooling(t, reg, "sim/echo") || !cooling(t, reg, "sim/echo|server-keys") {
			t.Fatal("the server key's 429 cooled the model, or not the server's keys")
		}
		evs = prompt(t, m, a, "again")
		if n := len(only(evs, session.EventModelChange)); n != 0 || a.State().Model != "sim/echo" {
			t.Fatalf("A, on its own key, moved off sim/echo: %s", kinds(evs))
		}
		if ms := only(evs, session.EventMessageStart); ms[0].Credential != "a1" {
			t.Fatalf("A's call used %q; want its own a1", ms[0].Credential)
		}
		evs = prompt(t, m, b, "again")
		if n := len(only(evs, session.EventModelChange)); n != 0 || b.State().Model != "sim/backup" {
			t.Fatalf("B went back to sim/echo during the server keys' cooldown: %s", kinds(evs))
		}
		evs = prompt(t, m, sessionOf(t, m, "B"), "hi")
		if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].To != "sim/backup" || mc[0].Reason != session.ChangeCooldown {
			t.Fatalf("B's new session during the server keys' cooldown: %s", kinds(evs))
		}
		a2 := sessionOf(t, m, "A")
		evs = prompt(t, m, a2, "hi")
		if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].To != "sim/backup" {
			t.Fatalf("A's new session's first prompt: %s", kinds(evs))
		}
		evs = prompt(t, m, a2, "again")
		if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].To != "sim/echo" || mc[0].Reason != session.ChangeRevert {
			t.Fatalf("A's new session, its call made on its own key: %s", kinds(evs))
		}

		// After the cooldown (30 s for a rate limit), B's session goes back,
		// its call the server keys' probe. With probes, a failure of that
		// probe on the server's key cools the server's keys for twice as
		// long, and still not the model.
		time.Sleep(31 * time.Second)
		if probing {
			evs = prompt(t, m, b, "[[faults: 429,ok]]")
			if fb := only(evs, session.EventRetryFallbackApplied); len(fb) != 1 || fb[0].From != "sim/echo" {
				t.Fatalf("B's probe failing on the server key: %s", kinds(evs))
			}
			until, err := reg.SuppressedUntil(context.Background(), "sim/echo|server-keys")
			if err != nil || time.Until(until) < 59*time.Second || cooling(t, reg, "sim/echo") {
				t.Fatalf("after the failed probe: the server keys cool until %v (%v), the model cooling %v; want 60 s, and not the model",
					until, err, cooling(t, reg, "sim/echo"))
			}
			time.Sleep(61 * time.Second)
		}
		n := len(rec.requests())
		evs = prompt(t, m, b, "later")
		if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].To != "sim/echo" || mc[0].Reason != session.ChangeRevert {
			t.Fatalf("B after the server keys' cooldown: %s", kinds(evs))
		}
		if got := credIDs(rec.requests()[n:]); len(got) != 1 || got[0] != "srv" {
			t.Fatalf("B's calls after the cooldown used %v; want one, on srv", got)
		}
		if probing {
			if a, err := reg.Admit(context.Background(), "sim/echo", "sim/echo|server-keys"); err != nil || !a.Allowed || a.Probe {
				t.Fatalf("after B's successful probe: %+v, %v; want the circuit closed", a, err)
			}
		}
	})
}
