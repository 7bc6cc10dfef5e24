package credstore

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/testkit"
)

func newTestClient(t *testing.T, addr string) redis.UniversalClient {
	c := redis.NewUniversalClient(ClientOptions(&redis.UniversalOptions{Addrs: []string{addr}}, 200*time.Millisecond))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// layout is the keys matching pattern, sorted, without the keys of once
// (a reply kept for a call run again), which it checks expire.
func layout(t *testing.T, c redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := testkit.Context(t)
	keys, err := c.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return slices.DeleteFunc(keys, func(k string) bool {
		if !strings.Contains(k, "}:once:") {
			return false
		}
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > onceTTL*time.Millisecond {
			t.Errorf("PTTL(%s) = %v, want in (0, %dms]", k, ttl, onceTTL)
		}
		return true
	})
}
