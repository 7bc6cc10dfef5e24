package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOptions sets on o what agentd's Redis-backed stores rely on:
// go-redis honours context deadlines (ContextTimeoutEnabled) and dial,
// read, write and pool waits are bounded by timeout (when not set). New
// builds its clients so; tests and tools that build a client of their own
// use it: redis.NewUniversalClient(redisconn.ClientOptions(&redis.UniversalOptions{Addrs: …}, 0)).
// timeout ≤ 0 means DefaultTimeout.
func ClientOptions(o *redis.UniversalOptions, timeout time.Duration) *redis.UniversalOptions {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	o.ContextTimeoutEnabled = true
	for _, d := range []*time.Duration{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout} {
		if *d == 0 {
			*d = timeout
		}
	}
	return o
}

// ContextTimeouts reports whether a known client type honours context
// deadlines, as ClientOptions and New set it (unknown types, such as
// wrappers, are trusted). Every Redis-backed store checks its client with
// it: without it a dead Redis could hold requests past their deadline.
func ContextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// SetLogger routes go-redis' own messages (pool and connection trouble)
// to log, as records of their own instead of plain-text lines in the
// middle of agentd's log. go-redis has one logger per process.
func SetLogger(log *slog.Logger) {
	redis.SetLogger(goRedisLogger{log: log})
}

// goRedisLogger routes go-redis' internal log lines through slog.
type goRedisLogger struct{ log *slog.Logger }

// Printf implements go-redis' internal.Logging. Its lines report trouble
// (a failed dial, a bad connection discarded): warnings, except for
// Sentinel's news of the master it found, a new master after a failover or
// a Sentinel discovered, which are what should happen: information.
func (l goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	level := slog.LevelWarn
	for _, news := range sentinelNews {
		if strings.HasPrefix(format, news) {
			level = slog.LevelInfo
		}
	}
	l.log.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "go-redis")
}

// sentinelNews start go-redis' Sentinel lines that report no trouble.
var sentinelNews = []string{"sentinel: selected addr=", "sentinel: new master=", "sentinel: discovered new sentinel="}
