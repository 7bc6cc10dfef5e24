package retrybudget_test

import (
	"context"
	"testing"
	"time"

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
