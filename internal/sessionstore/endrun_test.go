package sessionstore

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// roundTrips counts a client's round trips: a command on its own or a
// pipeline.
type roundTrips struct{ n *atomic.Int64 }

func (roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// twoReplicas are two stores on one client of a redis-server of the
// test's own, and the client's round trips counted.
func twoReplicas(t *testing.T) (c redis.UniversalClient, n *atomic.Int64, a, b *Redis) {
	t.Helper()
	srv := redistest.Start(t)
	c = newClient(t, srv.Addr(), time.Second)
	n = new(atomic.Int64)
	c.AddHook(roundTrips{n})
	return c, n, newStore(t, c, Options{}), newStore(t, c, Options{})
}

// EndRun by the lease's holder is one round trip: the run and the lease
// gone, the session out of the running set and the prompt's slot free. By
// a replica that no longer holds the lease (another took the prompt over,
// with its slot), it changes nothing: the set's entry and the slot, which
// its pipeline took ahead of the script's answer, are back as they were
// (the slot with its own time), in one round trip more; and what was not
// there is not added.
func TestEndRunInOneRoundTrip(t *testing.T) {
	c, n, a, b := twoReplicas(t)
	ctx := testkit.Context(t)
	slot := func(p string) session.PromptSlot { return session.PromptSlot{Tenant: "acme", PromptID: p} }
	start := func(id, p string) {
		t.Helper()
		res, err := a.Start(ctx, id, time.Minute, session.Run{PromptID: p, Replica: a.ReplicaID()}, nil, slot(p), 10)
		if err != nil || !res.Started {
			t.Fatalf("Start %s: %+v, %v", id, res, err)
		}
	}
	running := func(id string) bool {
		t.Helper()
		ids, err := a.Running(ctx)
		must(t, err)
		return slices.Contains(ids, id)
	}
	score := func(p string) (float64, bool) {
		t.Helper()
		s, err := c.ZScore(ctx, a.promptsKey("acme"), p).Result()
		if errors.Is(err, redis.Nil) {
			return 0, false
		}
		must(t, err)
		return s, true
	}
	endRun := func(st *Redis, id, p string) int64 {
		t.Helper()
		before := n.Load()
		must(t, st.EndRun(ctx, id, slot(p)))
		return n.Load() - before
	}
	for _, id := range []string{"ses_1", "ses_2"} {
		if _, err := a.Create(ctx, record(id, "acme"), 0); err != nil {
			t.Fatal(err)
		}
	}
	// The scripts loaded (the one that puts a slot back runs only on a
	// lost lease).
	start("ses_1", "p0")
	endRun(a, "ses_1", "p0")
	must(t, slotRestoreScript.Load(ctx, c).Err())

	start("ses_1", "p1")
	if !running("ses_1") {
		t.Fatal("ses_1 not in the running set after Start")
	}
	if rt := endRun(a, "ses_1", "p1"); rt != 1 {
		t.Errorf("the holder's EndRun: %d round trips, want 1", rt)
	}
	if h, _ := a.Holder(ctx, "ses_1"); h != "" {
		t.Errorf("holder %q after EndRun", h)
	}
	if _, found, _ := a.LoadRun(ctx, "ses_1"); found {
		t.Error("the run is still there after EndRun")
	}
	if running("ses_1") {
		t.Error("ses_1 still in the running set after EndRun")
	}
	if _, ok := score("p1"); ok {
		t.Error("p1's slot still taken after EndRun")
	}

	// B takes ses_2's prompt over from A (A's lease lost), as the janitor
	// does: the lease, then the prompt's slot with a time of its own.
	start("ses_2", "p2")
	must(t, c.Del(ctx, a.key("ses_2", "lease")).Err())
	if ok, _, err := b.Acquire(ctx, "ses_2", time.Minute); !ok || err != nil {
		t.Fatalf("B's Acquire = %v, %v", ok, err)
	}
	must(t, b.Occupy(ctx, slot("p2"), time.Hour))
	s0, ok := score("p2")
	if !ok {
		t.Fatal("p2 has no slot after B's Occupy")
	}
	ttl0 := c.PTTL(ctx, a.promptsKey("acme")).Val()
	if rt := endRun(a, "ses_2", "p2"); rt != 2 {
		t.Errorf("EndRun of a lost lease: %d round trips, want 2 (the pipeline, then what it took put back)", rt)
	}
	if h, _ := a.Holder(ctx, "ses_2"); h != b.ReplicaID() {
		t.Errorf("holder %q after A's EndRun, want B", h)
	}
	if _, found, _ := a.LoadRun(ctx, "ses_2"); !found {
		t.Error("A's EndRun dropped the run B holds")
	}
	if !running("ses_2") {
		t.Error("A's EndRun left ses_2 out of the running set, while B runs it")
	}
	if s, ok := score("p2"); !ok || s != s0 {
		t.Errorf("p2's slot after A's EndRun: %v (taken %v), want %v", s, ok, s0)
	}
	if ttl := c.PTTL(ctx, a.promptsKey("acme")).Val(); ttl < ttl0-time.Minute {
		t.Errorf("the slots' key expires in %v after A's EndRun, %v before", ttl, ttl0)
	}

	// B ends it; A's EndRun after that adds nothing back.
	if rt := endRun(b, "ses_2", "p2"); rt != 1 {
		t.Errorf("B's EndRun: %d round trips, want 1", rt)
	}
	if rt := endRun(a, "ses_2", "p2"); rt != 1 {
		t.Errorf("EndRun of an ended run: %d round trips, want 1 (nothing to put back)", rt)
	}
	if running("ses_2") {
		t.Error("an EndRun of an ended run put ses_2 back in the running set")
	}
	if _, ok := score("p2"); ok {
		t.Error("an EndRun of an ended run put p2's slot back")
	}
}

// A replica's EndRun pipelines the running set's SREM behind the script
// that frees the lease; another replica can start the session's next prompt
// in between, and the SREM then takes that prompt's entry. The holder's
// next Renew puts it back, in the renewal's one round trip, so the janitor
// still finds the prompt should its replica be lost.
func TestRenewPutsBackTheRunningEntry(t *testing.T) {
	c, n, a, b := twoReplicas(t)
	ctx := testkit.Context(t)
	running := func() bool {
		t.Helper()
		ids, err := a.Running(ctx)
		must(t, err)
		return slices.Contains(ids, "ses_1")
	}
	if _, err := a.Create(ctx, record("ses_1", "acme"), 0); err != nil {
		t.Fatal(err)
	}
	slot := session.PromptSlot{Tenant: "acme", PromptID: "p2"}
	if res, err := b.Start(ctx, "ses_1", time.Minute, session.Run{PromptID: "p2", Replica: b.ReplicaID()}, nil, slot, 10); err != nil || !res.Started {
		t.Fatalf("B's Start: %+v, %v", res, err)
	}
	// A first renewal loads the scripts.
	if ok, err := b.Renew(ctx, "ses_1", time.Minute, slot); !ok || err != nil {
		t.Fatalf("B's Renew = %v, %v", ok, err)
	}
	// A's late SREM, from the EndRun of the prompt before.
	must(t, c.SRem(ctx, a.runningKey(), "ses_1").Err())
	if running() {
		t.Fatal("ses_1 still in the running set after the SREM")
	}
	before := n.Load()
	if ok, err := b.Renew(ctx, "ses_1", time.Minute, slot); !ok || err != nil {
		t.Fatalf("B's Renew = %v, %v", ok, err)
	}
	if rt := n.Load() - before; rt != 1 {
		t.Errorf("Renew: %d round trips, want 1", rt)
	}
	if !running() {
		t.Error("ses_1 not back in the running set after its holder's Renew")
	}
	// A replica that lost the lease renews nothing (its SADD adds the
	// holder's own entry, there already).
	if ok, err := a.Renew(ctx, "ses_1", time.Minute, slot); ok || err != nil {
		t.Fatalf("A's Renew = %v, %v, want false", ok, err)
	}
	if h, _ := a.Holder(ctx, "ses_1"); h != b.ReplicaID() {
		t.Errorf("holder %q after A's Renew, want B", h)
	}
	must(t, b.EndRun(ctx, "ses_1", slot))
	if running() {
		t.Error("ses_1 in the running set after B's EndRun")
	}
}
