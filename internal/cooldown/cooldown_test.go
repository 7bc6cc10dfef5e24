package cooldown_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// registry is what both implementations offer.
type registry interface {
	Suppress(ctx context.Context, model string, until time.Time) error
	SuppressedUntil(ctx context.Context, model string) (time.Time, error)
	Active(ctx context.Context) (map[string]time.Time, error)
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func TestMemory(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r := cooldown.NewMemory(c.Now)
	ctx := context.Background()
	r.Suppress(ctx, "a/x", c.Now().Add(time.Minute))
	r.Suppress(ctx, "a/x", c.Now().Add(time.Second)) // a shorter one never shortens it
	if u, _ := r.SuppressedUntil(ctx, "a/x"); !u.Equal(c.Now().Add(time.Minute)) {
		t.Fatalf("until = %v", u)
	}
	if u, _ := r.SuppressedUntil(ctx, "a/y"); !u.IsZero() {
		t.Fatalf("unknown model cooling: %v", u)
	}
	c.mu.Lock()
	c.t = c.t.Add(time.Minute)
	c.mu.Unlock()
	if u, _ := r.SuppressedUntil(ctx, "a/x"); !u.IsZero() {
		t.Fatalf("expired cooldown still in force: %v", u)
	}
	if a, _ := r.Active(ctx); len(a) != 0 {
		t.Fatalf("active = %v", a)
	}
}

func newClient(t *testing.T, addr string) redis.UniversalClient {
	c := redis.NewUniversalClient(redisconn.ClientOptions(&redis.UniversalOptions{Addrs: []string{addr}}, 200*time.Millisecond))
	t.Cleanup(func() { c.Close() })
	return c
}

// Two replicas share cooldowns through one Redis; expiry follows Redis'
// clock.
func TestRedisSharedAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	b := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	if err := a.Suppress(ctx, "anthropic/claude", time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	u, err := b.SuppressedUntil(ctx, "anthropic/claude")
	if err != nil || u.IsZero() || time.Until(u) > 300*time.Millisecond {
		t.Fatalf("replica b sees %v, %v", u, err)
	}
	if act, _ := b.Active(ctx); len(act) != 1 {
		t.Fatalf("active on b = %v", act)
	}
	// Wait for the cooldown itself to run out on Redis' clock (the thing
	// under test), reading that clock rather than sleeping on ours.
	probe := redistest.Client(t, srv.Addr())
	testkit.EventuallyCtx(testkit.Context(t), t, testkit.PollEvery, "Redis' clock past the cooldown's end",
		func(ctx context.Context) (bool, error) {
			now, err := probe.Time(ctx).Result()
			return err == nil && now.After(u), err
		})
	if u, _ := b.SuppressedUntil(ctx, "anthropic/claude"); !u.IsZero() {
		t.Fatalf("expired cooldown still in force on b: %v", u)
	}
}

func TestRedisDownFallsBackToLocal(t *testing.T) {
	srv := redistest.New(t) // never started: connections are refused
	r := cooldown.NewRedis(newClient(t, srv.Addr()), "t:", nil)
	ctx := context.Background()
	if err := r.Suppress(ctx, "m/x", time.Now().Add(time.Minute)); err == nil {
		t.Fatal("Suppress on a dead Redis reported no error")
	}
	if u, err := r.SuppressedUntil(ctx, "m/x"); err != nil || u.IsZero() {
		t.Fatalf("local fallback: %v, %v", u, err)
	}
}

var _ registry = (*cooldown.Memory)(nil)
var _ registry = (*cooldown.Redis)(nil)
