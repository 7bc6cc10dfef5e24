package cooldown_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/redistest"
)

// A probe's claim and its settling, each with its reply lost (the
// connection drops after Redis ran the script; go-redis sends it again):
// the claim run again is still this caller's probe, and a failure settled
// again counts once.
func TestRedisLostReplyRunsOnce(t *testing.T) {
	srv := redistest.Start(t)
	direct := newClient(t, srv.Addr())
	proxy := redistest.NewProxy(t, srv.Addr())
	r := cooldown.NewRedis(newClient(t, proxy.Addr()), "t:", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The circuit opens with a cooldown, which ends at once.
	if err := r.Suppress(ctx, "p/x", time.Now().Add(5*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(ctx, t, "the cooldown over", func(ctx context.Context) (bool, error) {
		u, err := r.SuppressedUntil(ctx, "p/x")
		return u.IsZero(), err
	})

	proxy.LoseScriptReply(ctx, cooldown.AdmitScript)
	a, err := r.Admit(ctx, "p/x")
	proxy.WaitLost(ctx)
	if err != nil || !a.Allowed || !a.Probe {
		t.Fatalf("Admit = %+v, %v; want this caller's probe", a, err)
	}
	if b, _ := r.Admit(ctx, "p/x"); b.Allowed {
		t.Fatalf("a second caller during the probe: %+v", b)
	}

	proxy.LoseScriptReply(ctx, cooldown.SettleScript)
	if err := r.Settle(ctx, "p/x", a.Token, cooldown.ProbeFailure, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	proxy.WaitLost(ctx)
	// One failed probe: 10 s × 2 (two would make it 40 s).
	u, err := r.SuppressedUntil(ctx, "p/x")
	if left := time.Until(u); err != nil || left < 15*time.Second || left > 21*time.Second {
		t.Fatalf("cooling for %v (%v) after one failed probe, want 20 s", left, err)
	}
	if n, err := direct.HGet(ctx, "t:{cooldowns}:circuit", "p/x").Int(); err != nil || n != 1 {
		t.Fatalf("failed probes = %d, %v; want 1", n, err)
	}
}
