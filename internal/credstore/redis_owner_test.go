package credstore

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// countHook counts the commands (round trips) a client sends for a
// context marked with counted (not the reconciler's).
type countHook struct{ n atomic.Int64 }

type countedKey struct{}

func counted(ctx context.Context) context.Context { return context.WithValue(ctx, countedKey{}, true) }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(countedKey{}) != nil {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(countedKey{}) != nil {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// A tenant's own credentials live under the provider's hash tag, and a
// pick or a usage limit is one round trip whoever asks: a tenant with
// credentials of its own, one without, the server's pool.
func TestRedisOwnedKeysAndRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestClient(t, srv.Addr())
	hook := &countHook{}
	c.AddHook(hook)
	ctx := testkit.Context(t)
	s := newRedisStore(t, c, RedisOptions{KeyPrefix: "own:", SyncInterval: time.Minute})
	addOwn(t, s, "", "p", "s1")
	addOwn(t, s, "A", "p", "a1", "a2")

	keys := layout(t, c, "own:*")
	want := []string{"own:providers", "own:{prov:p}:creds", "own:{prov:p}:meta", "own:{prov:p}:order",
		"own:{prov:p}:own:A:creds", "own:{prov:p}:own:A:order", "own:{prov:p}:owners"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %q, want %q", keys, want)
	}
	if raw := c.HGet(ctx, "own:{prov:p}:own:A:creds", "a1").Val(); !strings.Contains(raw, `"p1:secret-A-a1"`) {
		t.Errorf("A's a1 = %s", raw)
	}
	if m := c.SMembers(ctx, "own:{prov:p}:owners").Val(); !slices.Equal(m, []string{"A"}) {
		t.Errorf("owners = %q, want A", m)
	}

	// Load the scripts first (a NOSCRIPT fallback is a second trip).
	pickAs(t, s, "A", "p")
	if _, err := s.UsageLimited(ctx, "B", "p", "nope", time.Hour, true, ""); err == nil {
		t.Errorf("UsageLimited(B, nope) = nil error")
	}
	for _, tenant := range []string{"A", "B", ""} {
		before := hook.n.Load()
		if _, ok, err := s.Pick(counted(ctx), tenant, "p"); !ok || err != nil {
			t.Fatalf("Pick(%q) = %t, %v", tenant, ok, err)
		}
		if n := hook.n.Load() - before; n != 1 {
			t.Errorf("Pick(%q): %d round trips, want 1", tenant, n)
		}
	}
	before := hook.n.Load()
	if sw, err := s.UsageLimited(counted(ctx), "A", "p", "a1", time.Hour, true, "limit"); err != nil || !sw.Switched || sw.To.ID != "a2" {
		t.Errorf("UsageLimited(A, a1) = %+v, %v", sw, err)
	}
	if n := hook.n.Load() - before; n != 1 {
		t.Errorf("UsageLimited(A, a1): %d round trips, want 1", n)
	}
	if c.Exists(ctx, "own:{prov:p}:own:A:blocks").Val() != 1 || c.PTTL(ctx, "own:{prov:p}:own:A:blocks").Val() <= 0 {
		t.Errorf("A's blocks key is missing or has no TTL")
	}

	// The last of A's credentials deleted: A's keys and membership go.
	for _, id := range []string{"a1", "a2"} {
		if err := s.Delete(ctx, "A", id); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.Exists(ctx, "own:{prov:p}:own:A:creds", "own:{prov:p}:own:A:order", "own:{prov:p}:own:A:blocks", "own:{prov:p}:owners").Val(); n != 0 {
		t.Errorf("%d of A's keys are left after its last credential was deleted", n)
	}
	if rr := c.HExists(ctx, "own:{prov:p}:meta", "rr:A").Val(); rr {
		t.Errorf("A's rotation cursor is left")
	}
}

// Redis loses its data: the local view restores every owner's credentials
// (with their blocks, their owners) and another replica sees them so.
func TestRedisOwnersRestoredAfterDataLoss(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestClient(t, srv.Addr())
	ctx := testkit.Context(t)
	s := newRedisStore(t, c, RedisOptions{KeyPrefix: "oloss:", SyncInterval: 20 * time.Millisecond})
	addOwn(t, s, "", "p", "s1")
	addOwn(t, s, "A", "p", "a1", "a2")
	addOwn(t, s, "B", "p", "a1")
	limitedAs(t, s, "A", "a1", time.Hour)
	// The local view knows every owner once a sync has read them.
	testkit.Eventually(t, "the local view has every owner", func() bool {
		infos, _ := s.local.List(ctx, Filter{All: true})
		return ids(infos) == "s1,a1,a2,a1"
	})
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "restored", func() bool {
		return c.HLen(ctx, "oloss:{prov:p}:own:A:creds").Val() == 2 && c.HLen(ctx, "oloss:{prov:p}:own:B:creds").Val() == 1 &&
			c.HExists(ctx, "oloss:{prov:p}:own:A:blocks", "a1").Val() && c.SCard(ctx, "oloss:{prov:p}:owners").Val() == 2 &&
			// What another replica lists from: the providers and the
			// server's own credentials.
			c.SIsMember(ctx, "oloss:providers", "p").Val() && c.HLen(ctx, "oloss:{prov:p}:creds").Val() == 1
	})
	s2 := newRedisStore(t, c, RedisOptions{KeyPrefix: "oloss:"})
	if got := listed(t, s2, Filter{All: true}); got != "p:server/s1 p:A/a1 p:A/a2 p:B/a1" {
		t.Errorf("restored: %s", got)
	}
	if i := infoAs(t, s2, "A", "a1"); i.Status != StatusBlocked {
		t.Errorf("A's a1 restored = %+v; want blocked", i)
	}
	if i := infoAs(t, s2, "B", "a1"); i.Status != StatusAvailable {
		t.Errorf("B's a1 restored = %+v; want available (A's block is not B's)", i)
	}
	if got := picksAs(t, s2, "A", "p", 2); got != "A/a2 A/a2" {
		t.Errorf("A's picks on the restored Redis = %s", got)
	}
	if got := picksAs(t, s2, "B", "p", 1); got != "B/a1" {
		t.Errorf("B's pick on the restored Redis = %s", got)
	}
}

// Redis down: a replica serves each tenant's pool from its local view, a
// block made meanwhile reaches the right owner's credential in Redis, and
// API credentials (every tenant's) cannot be added or deleted.
func TestRedisOwnersInTheLocalView(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testkit.Context(t)
	opts := RedisOptions{KeyPrefix: "oout:", Timeout: 200 * time.Millisecond, SyncInterval: 20 * time.Millisecond}
	s := newRedisStore(t, newTestClient(t, srv.Addr()), opts)
	addOwn(t, s, "", "p", "s1")
	addOwn(t, s, "A", "p", "x", "a2")
	addOwn(t, s, "B", "p", "x")
	// Another replica, whose view comes from its syncs alone.
	s2 := newRedisStore(t, newTestClient(t, srv.Addr()), opts)
	testkit.Eventually(t, "the other replica's view has every owner", func() bool {
		infos, _ := s2.local.List(ctx, Filter{All: true})
		return ids(infos) == "s1,x,a2,x"
	})

	srv.Kill()
	if got := picksAs(t, s2, "A", "p", 2); got != "A/x A/a2" && got != "A/a2 A/x" {
		t.Errorf("A's picks during the outage = %s", got)
	}
	if got := picksAs(t, s2, "B", "p", 2); got != "B/x B/x" {
		t.Errorf("B's picks during the outage = %s", got)
	}
	if !s2.Degraded() {
		t.Fatalf("not degraded during the outage")
	}
	if sw := limitedAs(t, s2, "B", "x", time.Hour); !sw.Switched || sw.To.ID != "s1" {
		t.Errorf("UsageLimited(B, x) during the outage = %+v; want a switch to s1", sw)
	}
	// A's a2 is not in B's pool: B's usage limit of it blocks nothing, now
	// or when it is replayed.
	if sw, _ := s2.UsageLimited(ctx, "B", "p", "a2", time.Hour, true, "limit"); sw.Switched {
		t.Errorf("UsageLimited(B, A's a2) = %+v", sw)
	}
	if i := infoAs(t, s2, "A", "a2"); i.Status != StatusAvailable {
		t.Errorf("A's a2 in the local view = %+v; want available", i)
	}
	if _, err := s2.Add(ctx, Credential{ID: "y", Provider: "p", Secret: "s", Owner: "A"}); err == nil {
		t.Errorf("Add(A's y) during the outage = nil; want ErrUnavailable")
	}
	if err := s2.Delete(ctx, "A", "x"); err == nil {
		t.Errorf("Delete(A's x) during the outage = nil; want ErrUnavailable")
	}

	srv.Start()
	testkit.Eventually(t, "recovered", func() bool { return !s2.Degraded() })
	s3 := newRedisStore(t, newTestClient(t, srv.Addr()), opts)
	if b, a := infoAs(t, s3, "B", "x"), infoAs(t, s3, "A", "x"); b.Status != StatusBlocked || a.Status != StatusAvailable {
		t.Errorf("after the outage: B's x = %+v, A's x = %+v; want B's blocked, A's available", b, a)
	}
	if i := infoAs(t, s3, "A", "a2"); i.Status != StatusAvailable {
		t.Errorf("A's a2 after the outage = %+v; want available", i)
	}
	if got := picksAs(t, s3, "B", "p", 2); got != "server/s1 server/s1" {
		t.Errorf("B's picks after the outage = %s; want s1 (its x is blocked)", got)
	}
}

// A tenant's sealed secret is bound to its owner: copied into another
// tenant's credential of the same ID, it does not open.
func TestRedisSealedSecretsBoundToOwner(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestClient(t, srv.Addr())
	ctx := testkit.Context(t)
	key := []byte("0123456789abcdef0123456789abcdef")
	s := newRedisStore(t, c, RedisOptions{KeyPrefix: "oseal:", SecretKey: key})
	addOwn(t, s, "A", "p", "x")
	addOwn(t, s, "B", "p", "x")
	raw := c.HGet(ctx, "oseal:{prov:p}:own:A:creds", "x").Val()
	if strings.Contains(raw, "secret-A-x") || !strings.Contains(raw, `"g1:`) {
		t.Fatalf("A's x = %s; want a sealed secret", raw)
	}
	if got := pickAs(t, s, "A", "p"); got != "A/x" {
		t.Errorf("A's pick = %s", got)
	}
	if err := c.HSet(ctx, "oseal:{prov:p}:own:B:creds", "x", raw).Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Pick(ctx, "B", "p")
	if err == nil || strings.Contains(err.Error(), "secret-A-x") || !strings.Contains(err.Error(), "secret key") {
		t.Errorf("B's pick of A's sealed secret = %v; want an error about the secret key", err)
	}
}
