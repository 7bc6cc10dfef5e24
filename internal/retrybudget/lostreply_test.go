package retrybudget_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retrybudget"
)

// A retry's decision and a flush of successes, each with its reply lost
// (the connection drops after Redis ran the script; go-redis sends it
// again): the decision spends one token, not two, and the successes are
// credited once.
func TestRedisLostReplyRunsOnce(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	b := retrybudget.NewRedis(newClient(t, proxy.Addr()), a6, retrybudget.RedisOptions{KeyPrefix: "t:", FlushInterval: time.Hour})
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for range 2 {
		if d, err := b.Retry(ctx, "p/x"); err != nil || !d.Allowed {
			t.Fatalf("Retry = %+v, %v", d, err)
		}
	}
	proxy.LoseScriptReply(ctx, retrybudget.BudgetScript)
	d, err := b.Retry(ctx, "p/x")
	proxy.WaitLost(ctx)
	if err != nil || !d.Allowed || d.Tokens != 7 {
		t.Fatalf("the third Retry = %+v, %v; want allowed, 7 tokens left", d, err)
	}
	if l, err := b.Levels(ctx); err != nil || l["p/x"] != 7 {
		t.Fatalf("levels = %v, %v; want 7 tokens left after 3 retries", l, err)
	}

	// Two successes (a credit of 0.5 token each) flushed, the reply lost.
	b.Succeeded("p/x")
	b.Succeeded("p/x")
	proxy.LoseScriptReply(ctx, retrybudget.BudgetScript)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.WaitLost(ctx)
	if l, err := b.Levels(ctx); err != nil || l["p/x"] != 8 {
		t.Fatalf("levels = %v, %v; want 8 tokens after two successes", l, err)
	}
}

// noRetryClient is a client that never sends a command again itself (as
// when go-redis' own retries ran out): a lost reply comes back as an
// error, and whether the call ran is the budget's to find out.
func noRetryClient(t *testing.T, addr string) redis.UniversalClient {
	o := redisconn.ClientOptions(&redis.UniversalOptions{Addrs: []string{addr}}, 500*time.Millisecond)
	o.MaxRetries = -1
	c := redis.NewUniversalClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// lossy is a replica whose client gives up on a lost reply, behind a
// proxy that loses them, with a probe of the Redis behind it.
type lossy struct {
	*retrybudget.Redis
	proxy *redistest.Proxy
	probe *redis.Client
}

// newLossy starts a Redis and a lossy replica on it, whose four retries
// have brought p/x to 6 tokens.
func newLossy(ctx context.Context, t *testing.T, o retrybudget.RedisOptions) lossy {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	o.KeyPrefix, o.FlushInterval = "t:", time.Hour
	l := lossy{retrybudget.NewRedis(noRetryClient(t, proxy.Addr()), a6, o), proxy, redistest.Client(t, srv.Addr())}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	for range 4 {
		if _, err := l.Retry(ctx, "p/x"); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// loseFlush counts two successes of p/x and flushes them, the reply lost.
func (l lossy) loseFlush(ctx context.Context, t *testing.T) {
	t.Helper()
	l.Succeeded("p/x")
	l.Succeeded("p/x")
	l.proxy.LoseScriptReply(ctx, retrybudget.BudgetScript)
	if err := l.Flush(ctx); err == nil {
		t.Fatal("a flush whose reply was lost reported no error")
	}
	l.proxy.WaitLost(ctx)
}

// level is model's shared level in tokens, read behind the budget's back.
func level(ctx context.Context, t *testing.T, c *redis.Client, model string) float64 {
	t.Helper()
	v, err := c.HGet(ctx, "t:{budget}:tokens", model).Int64()
	if errors.Is(err, redis.Nil) {
		return float64(a6.MaxTokens)
	}
	if err != nil {
		t.Fatal(err)
	}
	return float64(v) / 1000
}

// A flush whose reply is lost and whose client gives up: the successes
// may be in Redis or not. The next flush sends them again under the same
// token, after another replica's flush and with new successes of this
// one's: each success is credited once.
func TestRedisUnansweredFlushCreditedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := newLossy(ctx, t, retrybudget.RedisOptions{})
	b := replicas(t, a.probe.Options().Addr, 1)[0]
	a.loseFlush(ctx, t)
	if l := level(ctx, t, a.probe, "p/x"); l != 7 {
		t.Fatalf("level after the lost flush = %v, want 7 (6 + two successes)", l)
	}
	b.Succeeded("p/x")
	b.Succeeded("p/x")
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.Succeeded("p/x")
	a.Succeeded("p/x")
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if l := level(ctx, t, a.probe, "p/x"); l != 9 {
		t.Fatalf("level = %v, want 9: a's first two successes credited once, b's two, a's next two", l)
	}
}

// A retry's reply lost, its client giving up: the retry is decided on the
// local copy, and the successes the call carried are sent again with the
// next flush under the call's token, which finds them credited already.
func TestRedisUnansweredRetryCreditsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := newLossy(ctx, t, retrybudget.RedisOptions{})
	probe := a.probe
	a.Succeeded("p/x")
	a.Succeeded("p/x")
	a.proxy.LoseScriptReply(ctx, retrybudget.BudgetScript)
	d, err := a.Retry(ctx, "p/x")
	a.proxy.WaitLost(ctx)
	if err == nil || !d.Allowed {
		t.Fatalf("the retry whose reply was lost = %+v, %v; want allowed on the local copy, with an error", d, err)
	}
	if l := level(ctx, t, probe, "p/x"); l != 6 {
		t.Fatalf("level = %v, want 6 (6 + two successes - one retry)", l)
	}
	// While that call's successes wait for an answer, a retry carries none.
	a.Succeeded("p/x")
	if d, err := a.Retry(ctx, "p/x"); err != nil || d.Tokens != 5 {
		t.Fatalf("retry = %+v, %v; want 5 tokens left, the new success not sent with it", d, err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if l := level(ctx, t, probe, "p/x"); l != 5.5 {
		t.Fatalf("level after the flush = %v, want 5.5: the lost call's successes once, the new one", l)
	}
}

// Successes unanswered for longer than Redis keeps a call's answer are
// dropped, not sent again: their answer may be gone, and the budget must
// not fill faster than its successes.
func TestRedisUnansweredTooLongDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	now := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a := newLossy(ctx, t, retrybudget.RedisOptions{Now: clock})
	probe := a.probe
	a.loseFlush(ctx, t)
	// Ten minutes on, Redis has let the call's answer expire.
	mu.Lock()
	now = now.Add(10 * time.Minute)
	mu.Unlock()
	keys, err := probe.Keys(ctx, "t:{budget}:once:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("answers kept = %v, %v", keys, err)
	}
	if err := probe.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if l := level(ctx, t, probe, "p/x"); l != 7 {
		t.Fatalf("level = %v, want 7: the two successes credited once", l)
	}
}

// Successes a dead Redis never received are sent again once it is back.
func TestRedisUnsentSuccessesArriveLater(t *testing.T) {
	srv := redistest.Start(t)
	probe := redistest.Client(t, srv.Addr())
	a := retrybudget.NewRedis(noRetryClient(t, srv.Addr()), a6, retrybudget.RedisOptions{KeyPrefix: "t:", FlushInterval: time.Hour})
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a.Succeeded("p/x")
	srv.Kill()
	if err := a.Flush(ctx); err == nil {
		t.Fatal("a flush to a dead Redis reported no error")
	}
	srv.Start()
	if err := probe.HSet(ctx, "t:{budget}:tokens", "p/x", 4000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if l := level(ctx, t, probe, "p/x"); l != 4.5 {
		t.Fatalf("level = %v, want 4.5: the success sent once Redis was back", l)
	}
}
