package session_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/session"
)

// Three replicas sharing their cooldowns through one Redis, ten sessions
// each, all prompting at once when sim/echo's cooldown ends: exactly one
// call goes to sim/echo (the probe; every call hangs, so none settles
// before all have chosen), the others start on the fallback. Twenty rounds.
func TestExactlyOneProbeAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	simRec := &recorder{Provider: sim.New(sim.Options{})}
	var regs []*cooldown.Redis
	var managers []*session.Manager
	for range 3 {
		c := redis.NewUniversalClient(credstore.ClientOptions(&redis.UniversalOptions{Addrs: []string{srv.Addr()}}, 2*time.Second))
		t.Cleanup(func() { c.Close() })
		reg := cooldown.NewRedis(c, "probe:", nil)
		regs = append(regs, reg)
		managers = append(managers, probeManager(t, registryProber{reg}, simRec))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := range 20 {
		before := callsTo(simRec.requests(), "echo")
		if err := regs[round%3].Suppress(ctx, "sim/echo", time.Now().Add(30*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		var sessions []*session.Session
		for i := range 30 {
			s, err := managers[i%3].Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
			if err != nil {
				t.Fatal(err)
			}
			sessions = append(sessions, s)
		}
		redistest.Eventually(ctx, t, "cooldown over", func(ctx context.Context) (bool, error) {
			u, err := regs[1].SuppressedUntil(ctx, "sim/echo")
			return u.IsZero(), err
		})
		var wg sync.WaitGroup
		for _, s := range sessions {
			wg.Go(func() {
				_, sub, err := s.Prompt(ctx, "[[faults: hang]]")
				if err != nil {
					t.Error(err)
					return
				}
				defer sub.Close()
				for {
					e, err := sub.Next(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if e.Type == session.EventMessageStart {
						return
					}
				}
			})
		}
		wg.Wait()
		if n := callsTo(simRec.requests(), "echo") - before; n != 1 {
			t.Fatalf("round %d: %d calls to sim/echo when its cooldown ended, want exactly 1 (the probe)", round, n)
		}
		for _, s := range sessions {
			if err := s.Abort(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}
