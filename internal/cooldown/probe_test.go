package cooldown_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// prober is what both registries offer for half-open probing.
type prober interface {
	registry
	Admit(ctx context.Context, names ...string) (cooldown.Admission, error)
	Settle(ctx context.Context, model, token, outcome string, d time.Duration) error
}

var (
	_ prober = (*cooldown.Memory)(nil)
	_ prober = (*cooldown.Redis)(nil)
)

// The circuit of one model in memory: cooling, then one probe at a time;
// a release lets the next caller probe, a failure cools it down for twice
// as long, a success closes it.
func TestMemoryProbeLifecycle(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r := cooldown.NewMemory(c.Now)
	ctx := context.Background()
	advance := func(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
	if a, _ := r.Admit(ctx, "p/x"); !a.Allowed || a.Probe {
		t.Fatalf("a model never cooled: %+v", a)
	}
	r.Suppress(ctx, "p/x", c.Now().Add(time.Minute))
	if a, _ := r.Admit(ctx, "p/x"); a.Allowed {
		t.Fatalf("cooling: %+v", a)
	}
	advance(time.Minute)
	first, _ := r.Admit(ctx, "p/x")
	if !first.Allowed || !first.Probe || first.Token == "" {
		t.Fatalf("first caller after the cooldown: %+v", first)
	}
	if a, _ := r.Admit(ctx, "p/x"); a.Allowed {
		t.Fatalf("a second caller during the probe: %+v", a)
	}
	r.Settle(ctx, "p/x", first.Token, cooldown.ProbeReleased, 0)
	second, _ := r.Admit(ctx, "p/x")
	if !second.Probe {
		t.Fatalf("after a release: %+v", second)
	}
	r.Settle(ctx, "p/x", second.Token, cooldown.ProbeFailure, 10*time.Second)
	if u, _ := r.SuppressedUntil(ctx, "p/x"); !u.Equal(c.Now().Add(20 * time.Second)) {
		t.Fatalf("after a failed probe: cooling until %v, want now+20s", u)
	}
	advance(20 * time.Second)
	third, _ := r.Admit(ctx, "p/x")
	r.Settle(ctx, "p/x", third.Token, cooldown.ProbeFailure, 10*time.Second)
	if u, _ := r.SuppressedUntil(ctx, "p/x"); !u.Equal(c.Now().Add(40 * time.Second)) {
		t.Fatalf("after two failed probes: cooling until %v, want now+40s", u)
	}
	advance(40 * time.Second)
	fourth, _ := r.Admit(ctx, "p/x")
	r.Settle(ctx, "p/x", fourth.Token, cooldown.ProbeSuccess, 0)
	for range 3 {
		if a, _ := r.Admit(ctx, "p/x"); !a.Allowed || a.Probe {
			t.Fatalf("closed circuit: %+v", a)
		}
	}
	// A claim whose holder vanished expires.
	r.SetProbeTTL(time.Second)
	r.Suppress(ctx, "p/y", c.Now().Add(time.Second))
	advance(time.Second)
	if a, _ := r.Admit(ctx, "p/y"); !a.Probe {
		t.Fatalf("p/y: %+v", a)
	}
	advance(time.Second)
	if a, _ := r.Admit(ctx, "p/y"); !a.Probe {
		t.Fatalf("an expired claim still held: %+v", a)
	}
}

// Three replicas on one Redis, 90 callers at once when the cooldown ends:
// exactly one probe, every time (20 rounds).
func TestRedisExactlyOneProbe(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var rs []*cooldown.Redis
	for range 3 {
		rs = append(rs, cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil))
	}
	for round := range 20 {
		model := "p/m" + string(rune('a'+round))
		if err := rs[0].Suppress(ctx, model, time.Now().Add(50*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		redistest.Eventually(wctx, t, "cooldown over", func(ctx context.Context) (bool, error) {
			u, err := rs[1].SuppressedUntil(ctx, model)
			return u.IsZero(), err
		})
		cancel()
		var probes, allowed atomic.Int32
		var token atomic.Value
		var wg sync.WaitGroup
		for i := range 90 {
			wg.Go(func() {
				a, err := rs[i%3].Admit(ctx, model)
				if err != nil {
					t.Error(err)
				}
				if a.Allowed {
					allowed.Add(1)
				}
				if a.Probe {
					probes.Add(1)
					token.Store(a.Token)
				}
			})
		}
		wg.Wait()
		if probes.Load() != 1 || allowed.Load() != 1 {
			t.Fatalf("round %d: %d probes, %d allowed; want exactly one", round, probes.Load(), allowed.Load())
		}
		// The probe succeeds on replica 2: every replica may call the model.
		if err := rs[2].Settle(ctx, model, token.Load().(string), cooldown.ProbeSuccess, 0); err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if a, _ := r.Admit(ctx, model); !a.Allowed || a.Probe {
				t.Fatalf("round %d: after the success: %+v", round, a)
			}
		}
	}
}

// A replica that dies holding the probe does not wedge the model: its
// claim expires and another replica probes. A failed probe cools the model
// down for twice the cooldown, on every replica.
func TestRedisDeadProbeFreesAndFailureDoubles(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	dead := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	alive := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	dead.SetProbeTTL(300 * time.Millisecond)
	dead.Suppress(ctx, "p/x", time.Now().Add(20*time.Millisecond))
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var held cooldown.Admission
	redistest.Eventually(wctx, t, "the first probe", func(ctx context.Context) (bool, error) {
		a, err := dead.Admit(ctx, "p/x")
		held = a
		return a.Probe, err
	})
	if a, _ := alive.Admit(ctx, "p/x"); a.Allowed {
		t.Fatalf("while the dead replica's claim lasts: %+v", a)
	}
	var probe cooldown.Admission
	redistest.Eventually(wctx, t, "the claim expired, another probe", func(ctx context.Context) (bool, error) {
		a, err := alive.Admit(ctx, "p/x")
		probe = a
		return a.Probe, err
	})
	// The dead replica's late settle changes nothing.
	dead.Settle(ctx, "p/x", held.Token, cooldown.ProbeSuccess, 0)
	if a, _ := dead.Admit(ctx, "p/x"); a.Allowed {
		t.Fatalf("a stale token closed the circuit: %+v", a)
	}
	if err := alive.Settle(ctx, "p/x", probe.Token, cooldown.ProbeFailure, time.Minute); err != nil {
		t.Fatal(err)
	}
	u, err := dead.SuppressedUntil(ctx, "p/x")
	if left := time.Until(u); err != nil || left < 110*time.Second || left > 2*time.Minute {
		t.Fatalf("after the failed probe: %v left (%v), want 2m", left, err)
	}
}

// A model known by two names (its own, and the pool of keys its caller
// draws on): cooling while either cools; once both have ended, the probe
// is the first open one's, its name told; the other's circuit waits for
// the next caller. On both registries.
func TestAdmitSeveralNames(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name string
		new  func(*clock) prober
	}{
		{"memory", func(c *clock) prober { return cooldown.NewMemory(c.Now) }},
		{"redis", func(*clock) prober { return cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &clock{t: time.Now()}
			r := tc.new(c)
			ctx := testkit.Context(t)
			if err := r.Suppress(ctx, "p/x|pool", time.Now().Add(30*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if a, _ := r.Admit(ctx, "p/x"); !a.Allowed || a.Probe {
				t.Fatalf("p/x alone: %+v; want allowed (only its pool's name cools)", a)
			}
			if a, _ := r.Admit(ctx, "p/x", "p/x|pool"); a.Allowed {
				t.Fatalf("p/x through its pool: %+v; want avoided", a)
			}
			if err := r.Suppress(ctx, "p/x", time.Now().Add(30*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			c.t = c.t.Add(time.Second)
			c.mu.Unlock()
			var first cooldown.Admission
			redistest.Eventually(ctx, t, "the cooldowns over", func(ctx context.Context) (bool, error) {
				var err error
				first, err = r.Admit(ctx, "p/x", "p/x|pool")
				return first.Allowed, err
			})
			if !first.Probe || first.Name != "p/x" {
				t.Fatalf("the first caller: %+v; want the probe of p/x", first)
			}
			if a, _ := r.Admit(ctx, "p/x", "p/x|pool"); a.Allowed {
				t.Fatalf("a second caller during the probe: %+v", a)
			}
			if err := r.Settle(ctx, "p/x", first.Token, cooldown.ProbeSuccess, 0); err != nil {
				t.Fatal(err)
			}
			second, _ := r.Admit(ctx, "p/x", "p/x|pool")
			if !second.Probe || second.Name != "p/x|pool" {
				t.Fatalf("after p/x's probe: %+v; want the probe of p/x|pool", second)
			}
			if a, _ := r.Admit(ctx, "p/x"); !a.Allowed || a.Probe {
				t.Fatalf("p/x alone during its pool's probe: %+v; want allowed", a)
			}
			if err := r.Settle(ctx, "p/x|pool", second.Token, cooldown.ProbeSuccess, 0); err != nil {
				t.Fatal(err)
			}
			if a, _ := r.Admit(ctx, "p/x", "p/x|pool"); !a.Allowed || a.Probe {
				t.Fatalf("both circuits closed: %+v", a)
			}
		})
	}
}
