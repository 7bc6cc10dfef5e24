package metrics

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// The components a Redis round trip is counted for.
const (
	ComponentCredentials = "credentials" // the credential store
	ComponentCooldowns   = "cooldowns"   // the model cooldowns
	ComponentSessions    = "sessions"    // the shared sessions: records, histories, events, leases, control
	ComponentBudget      = "budget"      // the retry budget
)

// KeyOwners say which component each key belongs to: each store declares
// its own layout (its OwnsKey), so that the metrics parse none.
type KeyOwners struct {
	Credentials, Cooldowns, Sessions, Budget func(key string) bool
}

// Indexes into redisHook's per-component series (the order of
// RedisComponents).
const (
	compCredentials = iota
	compCooldowns
	compSessions
	compBudget
	compOther
	numComponents
)

// redisHook counts agentd's round trips to Redis: one per command (a script
// run included) and one per pipeline, however many commands it holds. The
// series are resolved once, so that a round trip costs two clock reads and
// a few atomic adds.
type redisHook struct {
	owners  [compOther]func(key string) bool // by component index
	trips   [numComponents]prometheus.Counter
	errs    [numComponents]prometheus.Counter
	seconds [numComponents]prometheus.Observer
}

var _ redis.Hook = (*redisHook)(nil)

// RedisHook returns the go-redis hook that counts round trips to Redis in
// agentd_redis_round_trips_total, agentd_redis_round_trip_seconds and
// agentd_redis_errors_total, by component, the stores telling which keys are
// theirs (owners; a nil one owns nothing). Add it to the shared client with
// AddHook before the stores use it.
//
// A round trip is counted for the component of the first key it touches: a
// command's first argument, a script's first key (EVAL, EVALSHA, FCALL and
// their _RO forms), a pipeline's first command (after MULTI). PUBLISH counts
// for its channel's component; commands without a key (PING, SCRIPT LOAD,
// HELLO, …) count as "other" (go-redis' handshake on a new connection is
// a round trip or three too). A round trip failed when its command — for a
// pipeline, the pipeline as a whole or its first command — returned an error
// other than redis.Nil and the error replies go-redis recovers from (see
// failed). Subscriptions run on connections of their own, outside the
// hooks, and are not counted.
func (m *Metrics) RedisHook(owners KeyOwners) redis.Hook {
	h := newRedisHook(owners)
	for i, c := range RedisComponents {
		h.trips[i] = m.RedisRoundTrips.WithLabelValues(c)
		h.errs[i] = m.RedisErrors.WithLabelValues(c)
		h.seconds[i] = m.RedisRoundTripTime.WithLabelValues(c)
	}
	return h
}

// newRedisHook is a hook classifying by owners, its series not set yet.
func newRedisHook(owners KeyOwners) *redisHook {
	h := &redisHook{}
	h.owners[compCredentials], h.owners[compCooldowns] = owners.Credentials, owners.Cooldowns
	h.owners[compSessions], h.owners[compBudget] = owners.Sessions, owners.Budget
	return h
}

// DialHook implements redis.Hook: connecting is not a round trip of its own.
func (h *redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: one command, one round trip.
func (h *redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		args := cmd.Args()
		h.observe(h.component(args), start, failed(args, err))
		return err
	}
}

// ProcessPipelineHook implements redis.Hook: a pipeline (or a MULTI/EXEC
// transaction) is one round trip.
func (h *redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		// Only the error next returns: a command's Err() may wait for the
		// batch this hook runs in (go-redis' deferred autopipeline).
		err := next(ctx, cmds)
		c, fail := compOther, failed(nil, err)
		for _, cmd := range cmds {
			if args := cmd.Args(); len(args) > 0 && !isName(args[0], "multi") {
				c, fail = h.component(args), failed(args, err)
				break
			}
		}
		h.observe(c, start, fail)
		return err
	}
}

func (h *redisHook) observe(c int, start time.Time, fail bool) {
	h.trips[c].Inc()
	h.seconds[c].Observe(time.Since(start).Seconds())
	if fail {
		h.errs[c].Inc()
	}
}

// failed reports whether a round trip failed: err is set, and is neither a
// nil reply (redis.Nil) nor an error reply go-redis recovers from by itself:
//   - NOSCRIPT: a script not in Redis' cache yet (after a restart, a
//     failover, or on first use); Script.Run, and the session store's
//     pipelines, send it again with EVAL;
//   - an error reply to CLIENT: go-redis sends CLIENT SETINFO and CLIENT
//     MAINT_NOTIFICATIONS when it opens a connection and ignores their
//     errors on servers without them (before Redis 7.2); agentd sends no
//     CLIENT command of its own.
func failed(args []any, err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true // the connection, a timeout, a cancelled context
	}
	if strings.HasPrefix(reply.Error(), "NOSCRIPT") {
		return false
	}
	return len(args) == 0 || !isName(args[0], "client")
}

// scriptCommands take their keys after the script (or its SHA, or the
// function's name) and the number of keys.
var scriptCommands = [...]string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// component is the component of a command's first key.
func (h *redisHook) component(args []any) int {
	if len(args) < 2 {
		return compOther
	}
	i := 1
	for _, s := range scriptCommands {
		if isName(args[0], s) {
			if len(args) < 4 || numKeys(args[2]) < 1 {
				return compOther
			}
			i = 3
			break
		}
	}
	key, ok := args[i].(string)
	if !ok {
		return compOther
	}
	return h.classify(key)
}

// classify maps a key (or a channel) to the component that owns it.
func (h *redisHook) classify(key string) int {
	for c, owns := range h.owners {
		if owns != nil && owns(key) {
			return c
		}
	}
	return compOther
}

// isName reports whether a command's name (its first argument) is name,
// in any case.
func isName(arg any, name string) bool {
	s, ok := arg.(string)
	return ok && len(s) == len(name) && strings.EqualFold(s, name)
}

// numKeys reads a script command's number of keys.
func numKeys(arg any) int {
	switch v := arg.(type) {
	case int:
		return v
	case int64:
		return int(v)
	case string:
		n, _ := strconv.Atoi(v)
		return n
	}
	return 0
}
