package retrybudget_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/retrybudget"
)

// budget is what both implementations offer.
type budget interface {
	Retry(ctx context.Context, model string) (retrybudget.Decision, error)
	Succeeded(model string)
	Levels(ctx context.Context) (map[string]float64, error)
}

var (
	_ budget = (*retrybudget.Memory)(nil)
	_ budget = (*retrybudget.Redis)(nil)
)

var a6 = retry.Budget{MaxTokens: 10, TokenRatio: 0.5}

func TestMemory(t *testing.T) {
	ctx := context.Background()
	m := retrybudget.NewMemory(a6)
	if l, _ := m.Levels(ctx); len(l) != 0 {
		t.Fatalf("a new budget lists %v", l)
	}
	allowed := 0
	for range 8 {
		if d, _ := m.Retry(ctx, "p/x"); d.Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d retries allowed, want 5 (10 tokens, threshold 5)", allowed)
	}
	// Another model's budget is its own.
	if d, _ := m.Retry(ctx, "p/y"); !d.Allowed || d.Tokens != 9 {
		t.Fatalf("p/y: %+v", d)
	}
	// Two successes buy one retry.
	m.Succeeded("p/x")
	m.Succeeded("p/x")
	if d, _ := m.Retry(ctx, "p/x"); !d.Allowed || d.Tokens != 5 {
		t.Fatalf("after two successes: %+v", d)
	}
	if l, _ := m.Levels(ctx); l["p/x"] != 5 || l["p/y"] != 9 {
		t.Fatalf("levels = %v", l)
	}
	// A full budget takes no room.
	for range 10 {
		m.Succeeded("p/y")
	}
	if l, _ := m.Levels(ctx); len(l) != 1 {
		t.Fatalf("levels = %v", l)
	}
}

func newClient(t *testing.T, addr string) redis.UniversalClient {
	c := redis.NewUniversalClient(redisconn.ClientOptions(&redis.UniversalOptions{Addrs: []string{addr}}, 500*time.Millisecond))
	t.Cleanup(func() { c.Close() })
	return c
}

// replicas returns n budgets on one Redis, with a flusher that never runs
// on its own (the tests flush).
func replicas(t *testing.T, addr string, n int) []*retrybudget.Redis {
	var out []*retrybudget.Redis
	for range n {
		r := retrybudget.NewRedis(newClient(t, addr), a6, retrybudget.RedisOptions{KeyPrefix: "t:", FlushInterval: time.Hour})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			r.Close(ctx)
		})
		out = append(out, r)
	}
	return out
}

// Three replicas spending one model's budget at once: exactly the five
// retries a full budget allows, across all of them.
func TestRedisSharedAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	for round := range 5 {
		rs := replicas(t, srv.Addr(), 3)
		model := "p/x" + string(rune('a'+round))
		var allowed atomic.Int32
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Go(func() {
				d, err := rs[i%3].Retry(context.Background(), model)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := allowed.Load(); n != 5 {
			t.Fatalf("round %d: %d retries allowed across 3 replicas, want 5", round, n)
		}
		if l, _ := rs[1].Levels(context.Background()); l[model] != 5 {
			t.Fatalf("levels = %v", l)
		}
	}
}

// Successes on one replica refill the budget another one spends from:
// with the next retry of the model on the same replica (one round trip),
// or with a flush.
func TestRedisSuccessesReachEveryReplica(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rs := replicas(t, srv.Addr(), 2)
	a, b := rs[0], rs[1]
	for range 5 {
		if d, _ := a.Retry(ctx, "p/x"); !d.Allowed {
			t.Fatal("refused early")
		}
	}
	if d, _ := b.Retry(ctx, "p/x"); d.Allowed {
		t.Fatalf("b allowed a retry of an exhausted budget: %+v", d)
	}
	// Two successes counted on a ride with a's next retry.
	a.Succeeded("p/x")
	a.Succeeded("p/x")
	if d, _ := a.Retry(ctx, "p/x"); !d.Allowed || d.Tokens != 5 {
		t.Fatalf("a after two successes: %+v", d)
	}
	// Successes on b reach a through b's flush.
	b.Succeeded("p/x")
	b.Succeeded("p/x")
	if d, _ := a.Retry(ctx, "p/x"); d.Allowed {
		t.Fatalf("b's successes counted before its flush: %+v", d)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.Retry(ctx, "p/x"); !d.Allowed {
		t.Fatalf("b's flushed successes not seen by a: %+v", d)
	}
	// Enough successes fill it again: the hash forgets the model.
	for range 100 {
		b.Succeeded("p/x")
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if l, _ := a.Levels(ctx); len(l) != 0 {
		t.Fatalf("levels after refilling = %v", l)
	}
}

// Redis down: decisions come from the local copy, seeded with the level
// last seen; the successes are kept for later.
func TestRedisDownDecidesLocally(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	r := replicas(t, srv.Addr(), 1)[0]
	for range 4 {
		r.Retry(ctx, "p/x")
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	d, err := r.Retry(ctx, "p/x")
	if err == nil || !d.Allowed || d.Tokens != 5 {
		t.Fatalf("fifth retry without Redis: %+v, %v", d, err)
	}
	if d, _ := r.Retry(ctx, "p/x"); d.Allowed {
		t.Fatalf("sixth retry without Redis allowed: %+v", d)
	}
	r.Succeeded("p/x")
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush to a dead Redis reported no error")
	}
	if l, _ := r.Levels(ctx); l["p/x"] != 5.5 {
		t.Fatalf("local levels = %v", l)
	}
}

// roundTrips counts the commands a client sends (a script run is one).
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "hello" && name != "client" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// What the budget costs in round trips: none for a successful call, one
// for a retry (its successes riding along), one per flush however many
// models and successes it carries, none for a flush with nothing to send.
func TestRedisRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := newClient(t, srv.Addr())
	h := &roundTrips{}
	c.AddHook(h)
	r := retrybudget.NewRedis(c, a6, retrybudget.RedisOptions{KeyPrefix: "rt:", FlushInterval: time.Hour})
	t.Cleanup(func() { r.Close(ctx) })
	r.Retry(ctx, "p/warm") // loads the script (EVALSHA, then EVAL)
	h.n.Store(0)
	for range 1000 {
		r.Succeeded("p/x")
		r.Succeeded("p/y")
	}
	if n := h.n.Load(); n != 0 {
		t.Fatalf("2000 successful calls cost %d round trips, want 0", n)
	}
	if _, err := r.Retry(ctx, "p/x"); err != nil || h.n.Load() != 1 {
		t.Fatalf("a retry cost %d round trips (%v), want 1", h.n.Load(), err)
	}
	if err := r.Flush(ctx); err != nil || h.n.Load() != 2 {
		t.Fatalf("a flush cost %d round trips (%v), want 1", h.n.Load()-1, err)
	}
	if err := r.Flush(ctx); err != nil || h.n.Load() != 2 {
		t.Fatalf("an empty flush cost a round trip (%v)", err)
	}
}
