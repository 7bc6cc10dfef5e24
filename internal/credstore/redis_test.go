package credstore

import (
	"errors"
	"fmt"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func newRedisStore(t *testing.T, c redis.UniversalClient, opts RedisOptions) *Redis {
	t.Helper()
	s, err := NewRedis(c, opts)
	if err != nil {
		t.Fatalf("NewRedis = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The conformance suite against one redis-server; each env has its own key
// prefix, and time moves by shifting Redis' TIME (RedisOptions.offset).
func TestRedisConformance(t *testing.T) {
	srv := redistest.Start(t)
	var n atomic.Int32
	runConformance(t, func(t *testing.T, redeemMin time.Duration) env {
		clk := testkit.NewClock(time.Now())
		prefix := fmt.Sprintf("conf%d:", n.Add(1))
		return env{clk: clk, open: func() Store {
			c := redis.NewUniversalClient(ClientOptions(&redis.UniversalOptions{Addrs: []string{srv.Addr()}}, 2*time.Second))
			t.Cleanup(func() { _ = c.Close() })
			s := newRedisStore(t, c, RedisOptions{KeyPrefix: prefix, Timeout: 2 * time.Second,
				SyncInterval: 50 * time.Millisecond, RedeemMinBlocked: redeemMin, MaxPerOwner: testMaxPerOwner, offset: clk.Offset})
			t.Cleanup(func() {
				if s.Degraded() {
					t.Errorf("the store became degraded: %v", s.Ready(testkit.Context(t)))
				}
			})
			return s
		}}
	})
}

// Blocks expire by themselves: the blocks key carries a TTL (real time,
// 300 ms) and vanishes when the last block ends. Also the key layout.
func TestRedisKeysAndTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestClient(t, srv.Addr())
	ctx := testkit.Context(t)
	s := newRedisStore(t, c, RedisOptions{KeyPrefix: "ttl:"})
	mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a"})
	mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b"})
	if sw := usageLimited(t, s, "a", 300*time.Millisecond, true); !sw.Switched || sw.To.ID != "b" {
		t.Fatalf("UsageLimited(a) = %+v; want a switch to b", sw)
	}

	keys := layout(t, c, "ttl:*")
	want := []string{"ttl:providers", "ttl:{prov:p}:blocks", "ttl:{prov:p}:creds", "ttl:{prov:p}:meta", "ttl:{prov:p}:order"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys = %q, want %q", keys, want)
	}
	if ttl := c.PTTL(ctx, "ttl:{prov:p}:blocks").Val(); ttl <= 0 || ttl > 300*time.Millisecond {
		t.Errorf("PTTL(blocks) = %v, want in (0, 300ms]", ttl)
	}
	for _, k := range []string{"ttl:providers", "ttl:{prov:p}:creds", "ttl:{prov:p}:meta", "ttl:{prov:p}:order"} {
		if ttl := c.PTTL(ctx, k).Val(); ttl != -1 {
			t.Errorf("PTTL(%s) = %v, want none", k, ttl)
		}
	}
	if raw := c.HGet(ctx, "ttl:{prov:p}:creds", "a").Val(); !strings.Contains(raw, `"p1:secret-a"`) {
		t.Errorf("creds[a] = %s; want the secret in clear (no secret key)", raw)
	}

	testkit.Eventually(t, "the blocks key expired", func() bool { return c.Exists(ctx, "ttl:{prov:p}:blocks").Val() == 0 })
	if i := infoOf(t, s, "p", "a"); i.Status != StatusAvailable {
		t.Errorf("a after its block = %+v; want available", i)
	}
	seen := map[string]bool{}
	for range 2 {
		seen[pickID(t, s, "p")] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Errorf("picks after the block = %v, want a and b", seen)
	}
}

// With a secret key, Redis holds only sealed secrets; a replica without the
// key (or with another) cannot use them and says so without the secret.
func TestRedisSealedSecrets(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestClient(t, srv.Addr())
	ctx := testkit.Context(t)
	key := []byte("0123456789abcdef0123456789abcdef")
	s := newRedisStore(t, c, RedisOptions{KeyPrefix: "seal:", SecretKey: key})
	mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a"})
	raw := c.HGet(ctx, "seal:{prov:p}:creds", "a").Val()
	if strings.Contains(raw, "secret-a") || !strings.Contains(raw, `"g1:`) {
		t.Errorf("creds[a] = %s; want a sealed secret", raw)
	}
	if id := pickID(t, s, "p"); id != "a" {
		t.Errorf("Pick = %s", id)
	}
	if _, err := NewRedis(c, RedisOptions{SecretKey: []byte("short")}); err == nil {
		t.Errorf("NewRedis with a 5-byte key: no error")
	}
	for _, k := range [][]byte{nil, []byte("fedcba9876543210fedcba9876543210")} {
		other := newRedisStore(t, c, RedisOptions{KeyPrefix: "seal:", SecretKey: k})
		_, _, err := other.Pick(ctx, "", "p")
		if err == nil || strings.Contains(err.Error(), "secret-a") || !strings.Contains(err.Error(), "secret key") {
			t.Errorf("Pick with key %q = %v; want an error about the secret key", k, err)
		}
	}
}

// Redis killed mid-test: the store keeps serving from its local view, a
// block made during the outage reaches Redis after the restart (which
// lost everything: the store restores its view), and the store leaves
// degraded mode.
func TestRedisKilledAndRestarted(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testkit.Context(t)
	opts := RedisOptions{KeyPrefix: "out:", Timeout: 200 * time.Millisecond, SyncInterval: 20 * time.Millisecond}
	s := newRedisStore(t, newTestClient(t, srv.Addr()), opts)
	mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a", Source: SourceConfig})
	mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b", BankedResets: 1, AutoRedeem: true})
	mustAdd(t, s, Credential{ID: "c", Provider: "p", Secret: "secret-c"})

	srv.Kill()
	start := time.Now()
	pickID(t, s, "p")
	sw := usageLimited(t, s, "a", time.Hour, true)
	if !sw.Switched || sw.To.ID == "a" || sw.Redeemed {
		t.Errorf("UsageLimited(a) during the outage = %+v; want a switch to b or c", sw)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Pick and UsageLimited on a dead Redis took %v", took)
	}
	if !s.Degraded() {
		t.Errorf("Degraded() = false during the outage")
	}
	if err := s.Ready(ctx); !errors.Is(err, ErrDegraded) || !strings.Contains(err.Error(), "since") {
		t.Errorf("Ready() during the outage = %v; want degraded", err)
	}
	if _, err := s.Add(ctx, Credential{ID: "d", Provider: "p", Secret: "secret-d"}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Add(api d) during the outage = %v; want ErrUnavailable", err)
	}
	if err := s.Delete(ctx, "", "c"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Delete(c) during the outage = %v; want ErrUnavailable", err)
	}
	mustAdd(t, s, Credential{ID: "e", Provider: "p", Secret: "secret-e", Source: SourceConfig})
	for range 8 {
		if id := pickID(t, s, "p"); id == "a" {
			t.Fatalf("picked the blocked a during the outage")
		}
	}
	if i := infoOf(t, s, "p", "a"); i.Status != StatusBlocked {
		t.Errorf("a during the outage = %+v; want blocked", i)
	}

	srv.Start()
	testkit.Eventually(t, "recovered", func() bool { return !s.Degraded() })
	if err := s.Ready(ctx); err != nil {
		t.Errorf("Ready() after the restart = %v", err)
	}
	// Another replica, with an empty local view, sees it all in Redis.
	s2 := newRedisStore(t, newTestClient(t, srv.Addr()), opts)
	infos, err := s2.List(ctx, Filter{Provider: "p"})
	if err != nil || s2.Degraded() {
		t.Fatalf("List on a new replica = %v, degraded %t", err, s2.Degraded())
	}
	got := map[string]Info{}
	for _, i := range infos {
		got[i.ID] = i
	}
	if len(got) != 4 || got["a"].Status != StatusBlocked || got["a"].BlockReason != "usage limit reached for a" ||
		got["b"].BankedResets != 1 || got["e"].Source != SourceConfig || got["c"].Source != SourceAPI {
		t.Errorf("after the restart Redis has %+v", infos)
	}
	// The block was made an hour from the outage's start; the restart took
	// a while (long on a loaded machine).
	approx(t, "a blocked until, from the outage's start", got["a"].BlockedUntil.Sub(start), time.Hour)
	for range 8 {
		if id := pickID(t, s2, "p"); id == "a" {
			t.Fatalf("the new replica picked the blocked a")
		}
	}
}

// Redis down when the store starts: configuration credentials are kept
// locally and written to Redis once it is up.
func TestRedisDownAtStart(t *testing.T) {
	srv := redistest.New(t)
	ctx := testkit.Context(t)
	s := newRedisStore(t, newTestClient(t, srv.Addr()), RedisOptions{KeyPrefix: "down:", Timeout: 200 * time.Millisecond, SyncInterval: 20 * time.Millisecond})
	mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a", Source: SourceConfig})
	mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b", Source: SourceConfig})
	if !s.Degraded() {
		t.Errorf("Degraded() = false without Redis")
	}
	if id := pickID(t, s, "p"); id != "a" {
		t.Errorf("Pick = %s, want a", id)
	}
	if sw := usageLimited(t, s, "a", time.Hour, false); !sw.Switched || sw.To.ID != "b" {
		t.Errorf("UsageLimited(a) = %+v; want a switch to b", sw)
	}

	srv.Start()
	t.Cleanup(srv.Kill)
	testkit.Eventually(t, "recovered", func() bool { return !s.Degraded() })
	s2 := newRedisStore(t, newTestClient(t, srv.Addr()), RedisOptions{KeyPrefix: "down:"})
	if a := infoOf(t, s2, "p", "a"); a.Status != StatusBlocked || !a.BlockEstimated {
		t.Errorf("a in Redis = %+v; want blocked (estimated)", a)
	}
	if b := infoOf(t, s2, "p", "b"); b.Status != StatusAvailable || b.Source != SourceConfig {
		t.Errorf("b in Redis = %+v; want available", b)
	}
	if err := s2.Ready(ctx); err != nil {
		t.Errorf("Ready() = %v", err)
	}
}

// Redis loses its data while the store thinks it is healthy (a restart
// between two syncs, FLUSHALL): Pick answers from the local view, and the
// store restores Redis from it.
func TestRedisDataLoss(t *testing.T) {
	srv := redistest.Start(t)
	c := newTestClient(t, srv.Addr())
	ctx := testkit.Context(t)
	s := newRedisStore(t, c, RedisOptions{KeyPrefix: "loss:", SyncInterval: 20 * time.Millisecond})
	mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a"})
	mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b", BankedResets: 2, Account: "org-b"})
	usageLimited(t, s, "a", time.Hour, true)
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if id := pickID(t, s, "p"); id != "b" {
		t.Errorf("Pick after FLUSHALL = %s, want b", id)
	}
	testkit.Eventually(t, "restored", func() bool {
		return c.HLen(ctx, "loss:{prov:p}:creds").Val() == 2 && c.HExists(ctx, "loss:{prov:p}:blocks", "a").Val() &&
			c.SIsMember(ctx, "loss:providers", "p").Val()
	})
	s2 := newRedisStore(t, c, RedisOptions{KeyPrefix: "loss:"})
	if b := infoOf(t, s2, "p", "b"); b.BankedResets != 2 || b.Source != SourceAPI || b.Account != "org-b" {
		t.Errorf("b restored = %+v", b)
	}
	if id := pickID(t, s2, "p"); id != "b" {
		t.Errorf("Pick on the restored Redis = %s, want b", id)
	}
}

// A Redis that accepts connections and never answers holds nothing longer
// than the timeouts.
func TestRedisUnresponsiveIsBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	ctx := testkit.Context(t)
	s := newRedisStore(t, newTestClient(t, l.Addr().String()), RedisOptions{KeyPrefix: "hang:", Timeout: 150 * time.Millisecond, SyncInterval: 20 * time.Millisecond})
	start := time.Now()
	mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a", Source: SourceConfig})
	if id := pickID(t, s, "p"); id != "a" {
		t.Errorf("Pick = %s", id)
	}
	if _, err := s.UsageLimited(ctx, "", "p", "a", time.Minute, true, "limit"); err != nil {
		t.Errorf("UsageLimited = %v", err)
	}
	if err := s.Ready(ctx); !errors.Is(err, ErrDegraded) {
		t.Errorf("Ready() = %v on an unresponsive Redis; want ErrDegraded", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("four calls on an unresponsive Redis took %v", took)
	}
}

func TestNewRedisRequiresContextTimeouts(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := NewRedis(c, RedisOptions{}); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Errorf("NewRedis with a client without context timeouts = %v; want an error", err)
	}
	if _, err := NewRedis(nil, RedisOptions{}); err == nil {
		t.Errorf("NewRedis(nil) = nil error")
	}
}
