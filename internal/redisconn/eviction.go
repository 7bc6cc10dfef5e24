package redisconn

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// EvictingError says that a Redis server of the store may evict keys:
// it has a maxmemory and a maxmemory-policy other than noeviction. Under
// memory pressure it would then drop agentd's keys as if they were a
// cache's: a session's record, history or events, a lease and its fencing
// epoch (every volatile-* policy picks keys with a TTL, as leases are), a
// credential's usage-limit block.
type EvictingError struct {
	// Node is the server (a Cluster master's address; "" for the server
	// or Sentinel's master).
	Node      string
	Policy    string
	MaxMemory int64
}

func (e *EvictingError) Error() string {
	on := "the server"
	if e.Node != "" {
		on = e.Node
	}
	return fmt.Sprintf("maxmemory-policy %s with maxmemory %d bytes on %s: under memory pressure Redis drops keys as a "+
		"cache's, and agentd's sessions, leases, fencing epochs and credential blocks would vanish; set maxmemory-policy "+
		"noeviction (a full Redis then refuses writes, and /readyz says OOM)", e.Policy, e.MaxMemory, on)
}

// Evicting reads INFO memory of the server, Sentinel's master or every
// Cluster master, and returns an *EvictingError for the first that may
// evict keys, nil when none may, or the error that kept it from asking.
func (c *Conn) Evicting(ctx context.Context) error {
	if c.topology != Cluster {
		return evicting(ctx, c.client, "")
	}
	var mu sync.Mutex
	var found error
	err := c.cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		err := evicting(ctx, node, node.Options().Addr)
		if err != nil {
			mu.Lock()
			if found == nil {
				found = err
			}
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return found
}

func evicting(ctx context.Context, c redis.UniversalClient, node string) error {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	var policy string
	var maxmemory int64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case !ok:
		case k == "maxmemory_policy":
			policy = v
		case k == "maxmemory":
			maxmemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if maxmemory > 0 && policy != "" && policy != "noeviction" {
		return &EvictingError{Node: node, Policy: policy, MaxMemory: maxmemory}
	}
	return nil
}
