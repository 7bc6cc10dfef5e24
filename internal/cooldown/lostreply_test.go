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

// A failed probe settled again (its reply lost, go-redis sending it anew)
// after another replica's probe of the same model was settled in between
// (the first claim expired and another replica claimed the model): the
// first failure still counts once.
func TestRedisSettleAgainAfterAnotherReplicas(t *testing.T) {
	srv := redistest.Start(t)
	direct := newClient(t, srv.Addr())
	a := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	b := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	a.SetProbeTTL(time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Suppress(ctx, "p/x", time.Now().Add(5*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var first cooldown.Admission
	redistest.Eventually(ctx, t, "a's probe", func(ctx context.Context) (bool, error) {
		var err error
		first, err = a.Admit(ctx, "p/x")
		return first.Probe, err
	})
	// a's claim expires before it settles; b claims the model and settles
	// its probe (a success would close the circuit: a release leaves it).
	var second cooldown.Admission
	redistest.Eventually(ctx, t, "b's probe", func(ctx context.Context) (bool, error) {
		var err error
		second, err = b.Admit(ctx, "p/x")
		return second.Probe, err
	})
	if err := a.Settle(ctx, "p/x", first.Token, cooldown.ProbeFailure, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Settle(ctx, "p/x", second.Token, cooldown.ProbeReleased, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// a's settling again, as go-redis sends it after a lost reply.
	if err := a.Settle(ctx, "p/x", first.Token, cooldown.ProbeFailure, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := direct.HGet(ctx, "t:{cooldowns}:circuit", "p/x").Int(); err != nil || n != 1 {
		t.Fatalf("failed probes = %d, %v; want 1", n, err)
	}
}

// A cooldown recorded while Redis was away is kept locally, and recorded
// in Redis once it answers again: neither the replica that saw the
// failure nor the others forget it when Redis is back.
func TestRedisCooldownDuringOutageReachesTheFleet(t *testing.T) {
	srv := redistest.Start(t)
	a := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	b := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Kill()
	until := time.Now().Add(time.Minute)
	if err := a.Suppress(ctx, "p/x", until); err == nil {
		t.Fatal("Suppress without Redis reported no error")
	}
	if u, err := a.SuppressedUntil(ctx, "p/x"); err != nil || u.IsZero() {
		t.Fatalf("a without Redis: until %v, %v; want its local cooldown", u, err)
	}
	srv.Start()
	if u, err := a.SuppressedUntil(ctx, "p/x"); err != nil || u.Before(until.Add(-5*time.Second)) {
		t.Fatalf("a with Redis back: until %v, %v; want about %v", u, err, until)
	}
	if u, err := b.SuppressedUntil(ctx, "p/x"); err != nil || u.Before(until.Add(-5*time.Second)) {
		t.Fatalf("b: until %v, %v; want a's cooldown, about %v", u, err, until)
	}
	if a, err := b.Admit(ctx, "p/x"); err != nil || a.Allowed {
		t.Fatalf("b's Admit = %+v, %v; want the model avoided", a, err)
	}
}
