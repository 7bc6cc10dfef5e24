package credstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func newTestClient(t *testing.T, addr string) redis.UniversalClient {
	c := redis.NewUniversalClient(ClientOptions(&redis.UniversalOptions{Addrs: []string{addr}}, 200*time.Millisecond))
	t.Cleanup(func() { _ = c.Close() })
	return c
}
