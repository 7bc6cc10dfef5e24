package session_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// registryProber gives the session engine a cooldown registry that probes
// (the server's adapter does the same).
type registryProber struct {
	reg interface {
		session.Cooldowns
		Admit(ctx context.Context, names ...string) (cooldown.Admission, error)
		Settle(ctx context.Context, model, token, outcome string, d time.Duration) error
	}
}

func (p registryProber) Suppress(ctx context.Context, model string, until time.Time) error {
	return p.reg.Suppress(ctx, model, until)
}
func (p registryProber) SuppressedUntil(ctx context.Context, model string) (time.Time, error) {
	return p.reg.SuppressedUntil(ctx, model)
}

var _ session.Prober = registryProber{}

func (p registryProber) Admit(ctx context.Context, names ...string) (session.Admission, error) {
	a, err := p.reg.Admit(ctx, names...)
	return session.Admission{Allowed: a.Allowed, Probe: a.Probe, Token: a.Token, Name: a.Name}, err
}
func (p registryProber) Settle(ctx context.Context, model, token, outcome string, d time.Duration) error {
	return p.reg.Settle(ctx, model, token, outcome, d)
}

// probeManager: the chain sim/echo → sim/backup → alt/echo, with a probing
// registry.
func probeManager(t *testing.T, reg registryProber, simRec *recorder) *session.Manager {
	t.Helper()
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"sim/backup", "alt/echo"}}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{
			{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"}, Client: simRec},
			{Name: "alt", Kind: provider.KindSimulated, Models: []string{"echo"}, Client: sim.New(sim.Options{})},
		},
		Retry:     settings,
		Cooldowns: reg,
		Rand:      func() float64 { return 1 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// callsTo counts the calls to model (sim's name) among reqs.
func callsTo(reqs []provider.Request, model string) int {
	n := 0
	for _, r := range reqs {
		if r.Model == model {
			n++
		}
	}
	return n
}

// When the cooldown ends, one session's call probes the model; the 20
// sessions that prompt while the probe is in flight keep off it; the
// probe's success closes the circuit and sessions return to the model.
func TestOneProbeWhenTheCooldownEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := cooldown.NewMemory(nil)
		simRec := &recorder{Provider: sim.New(sim.Options{})}
		m := probeManager(t, registryProber{mem}, simRec)
		cool(t, mem, time.Minute, "sim/echo")
		time.Sleep(time.Minute)
		prober := create(t, m, session.RetryOverrides{})
		_, sub, err := prober.Prompt(context.Background(), "probe [[faults: ok:delay=5000]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if ms := waitFor(t, sub, session.EventMessageStart); ms.Model != "sim/echo" {
			t.Fatalf("the probe went to %s", ms.Model)
		}
		var wg sync.WaitGroup
		for range 20 {
			s := create(t, m, session.RetryOverrides{})
			wg.Go(func() {
				evs := prompt(t, m, s, "meanwhile")
				if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].Reason != session.ChangeCooldown {
					t.Errorf("a session during the probe: %s", kinds(evs))
				}
			})
		}
		wg.Wait()
		if n := callsTo(simRec.requests(), "echo"); n != 1 {
			t.Fatalf("%d calls to sim/echo during the probe, want 1", n)
		}
		if pe := last(readUntilEnd(t, sub)); pe.Outcome != session.OutcomeCompleted {
			t.Fatalf("probe prompt_end = %+v", pe)
		}
		// Closed: new sessions call the model again.
		for range 3 {
			s := create(t, m, session.RetryOverrides{})
			if evs := prompt(t, m, s, "after"); len(only(evs, session.EventModelChange)) != 0 {
				t.Fatalf("after the probe's success: %s", kinds(evs))
			}
		}
		if n := callsTo(simRec.requests(), "echo"); n != 4 {
			t.Fatalf("%d calls to sim/echo, want 4", n)
		}
	})
}

// A failed probe cools the model down for twice the cooldown (an
// overloaded model: 60 s, so 120 s); an aborted probe frees the probe for
// the next session.
func TestProbeFailureAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := cooldown.NewMemory(nil)
		simRec := &recorder{Provider: sim.New(sim.Options{})}
		m := probeManager(t, registryProber{mem}, simRec)
		cool(t, mem, time.Minute, "sim/echo")
		time.Sleep(time.Minute)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: 529,ok]]")
		if last(evs).Outcome != session.OutcomeCompleted || len(only(evs, session.EventRetryFallbackApplied)) != 1 {
			t.Fatalf("failed probe: %s", kinds(evs))
		}
		if u, _ := mem.SuppressedUntil(context.Background(), "sim/echo"); time.Until(u) != 2*time.Minute {
			t.Fatalf("after the failed probe the model cools for %v, want 2m", time.Until(u))
		}
		time.Sleep(2 * time.Minute)
		// An aborted probe proves nothing: the next session probes.
		a := create(t, m, session.RetryOverrides{})
		_, sub, err := a.Prompt(context.Background(), "[[faults: hang]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if ms := waitFor(t, sub, session.EventMessageStart); ms.Model != "sim/echo" {
			t.Fatalf("the probe went to %s", ms.Model)
		}
		if err := a.Abort(context.Background()); err != nil {
			t.Fatal(err)
		}
		b := create(t, m, session.RetryOverrides{})
		if evs := prompt(t, m, b, "next"); len(only(evs, session.EventModelChange)) != 0 || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("after the aborted probe: %s", kinds(evs))
		}
		c := create(t, m, session.RetryOverrides{})
		if evs := prompt(t, m, c, "closed"); len(only(evs, session.EventModelChange)) != 0 {
			t.Fatalf("after b's successful probe: %s", kinds(evs))
		}
	})
}
