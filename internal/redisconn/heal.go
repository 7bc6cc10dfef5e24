package redisconn

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// healHook watches the calls' errors: on a Cluster one that says the slot
// map may be stale reloads it; with Sentinel a READONLY reply makes the
// client leave the demoted master. It never waits. Of a pipeline that
// failed it reads each command's error (a nil reply may come first; agentd
// runs no autopipeline, whose commands' Err would wait for the batch).
type healHook struct{ c *Conn }

var _ redis.Hook = healHook{}

func (h healHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h healHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			h.c.onError(err)
		}
		return err
	}
}

func (h healHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			return nil
		}
		if !errors.Is(err, redis.Nil) {
			h.c.onError(err)
			return err
		}
		for _, cmd := range cmds {
			if cerr := cmd.Err(); cerr != nil && !errors.Is(cerr, redis.Nil) {
				h.c.onError(cerr)
				break
			}
		}
		return err
	}
}

// onError starts a heal when err calls for one, at most every minHealGap.
func (c *Conn) onError(err error) {
	switch c.topology {
	case Cluster:
		if !staleTopology(err) {
			return
		}
	case Sentinel:
		if !isReadOnly(err) {
			return
		}
	default:
		return
	}
	now := time.Now().UnixNano()
	last := c.lastHeal.Load()
	if now-last < int64(minHealGap) || !c.lastHeal.CompareAndSwap(last, now) {
		return
	}
	if c.ctx.Err() != nil {
		return
	}
	c.heals.Add(1)
	switch c.topology {
	case Cluster:
		// Asynchronous (go-redis reloads in a goroutine of its own, one
		// at a time).
		c.cluster.ReloadState(c.ctx)
	case Sentinel:
		if !c.healing.CompareAndSwap(false, true) {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer c.healing.Store(false)
			c.leaveReplicas()
		}()
	}
}

// leaveReplicas asks the Sentinels for the master and its replicas and
// closes this client's connections to the replicas: the demoted master is
// one of them after a failover. The next call dials the master (go-redis'
// failover dialer asks a Sentinel on every new connection).
func (c *Conn) leaveReplicas() {
	ctx, cancel := context.WithTimeout(c.ctx, 2*c.timeout)
	defer cancel()
	var lastErr error
	for _, addr := range c.o.Addrs {
		master, replicas, err := c.askSentinel(ctx, addr)
		if err != nil {
			lastErr = err
			continue
		}
		doomed := map[string]bool{}
		for _, r := range replicas {
			if r != master {
				doomed[r] = true
			}
		}
		if n := c.tracker.closeTo(doomed); n > 0 {
			c.log.Warn("redis: READONLY from a demoted master: closed the connections to the replicas",
				"master", master, "connections", n)
		}
		return
	}
	c.log.Warn("redis: READONLY, and no Sentinel answered", "err", lastErr)
}

// askSentinel asks the Sentinel at addr for the master's address and its
// replicas'.
func (c *Conn) askSentinel(ctx context.Context, addr string) (string, []string, error) {
	sc := redis.NewSentinelClient(&redis.Options{
		Addr: addr, Username: c.o.SentinelUsername, Password: c.o.SentinelPassword, TLSConfig: c.o.TLS,
		DialTimeout: c.timeout, ReadTimeout: c.timeout,
		WriteTimeout: c.timeout, PoolSize: 1, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
	})
	defer sc.Close()
	m, err := sc.GetMasterAddrByName(ctx, c.o.MasterName).Result()
	if err != nil {
		return "", nil, err
	}
	if len(m) != 2 {
		return "", nil, errorf("sentinel %s: unexpected master address %v", addr, m)
	}
	master := net.JoinHostPort(m[0], m[1])
	rs, err := sc.Replicas(ctx, c.o.MasterName).Result()
	if err != nil {
		return "", nil, err
	}
	replicas := make([]string, 0, len(rs))
	for _, r := range rs {
		if ip, port := r["ip"], r["port"]; ip != "" && port != "" {
			replicas = append(replicas, net.JoinHostPort(ip, port))
		}
	}
	return master, replicas, nil
}

// staleTopology reports an error after which a Cluster's slot map may be
// out of date: a connection that failed or timed out (a node died), or a
// node that is not (or not yet) the master the map says.
func staleTopology(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "closed")
	}
	for _, p := range []string{"READONLY", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "TRYAGAIN", "MOVED", "ASK"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

// isReadOnly reports a READONLY reply (a write on a replica), also from
// inside a script.
func isReadOnly(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	s := re.Error()
	return strings.HasPrefix(s, "READONLY") || strings.Contains(s, "-READONLY") ||
		strings.Contains(s, "READONLY You can't write against a read only replica")
}
