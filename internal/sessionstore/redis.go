// Package sessionstore is the Redis implementation of session.Shared: the
// store through which several agentd replicas serve the same sessions.
//
// What lives where in Redis (<prefix> is Options.KeyPrefix; every key of
// one session carries the hash tag {<id>}, so that they share a Cluster
// slot and one DEL can drop them all):
//
//	<prefix>{<id>}:meta      HASH    record  = JSON of session.Record as created (Order, and the Mutable of the time)
//	                                 mutable = JSON of session.Mutable (Save overwrites it; Load reads Mutable from it)
//	<prefix>{<id>}:history   LIST    JSON of session.Entry; the list index is Entry.Index
//	<prefix>{<id>}:stripped  SET     history indexes that left the runtime context (Strip)
//	<prefix>{<id>}:events    STREAM  entry id <seq>-0, field e = JSON of session.Event; MAXLEN ~ Options.EventBuffer
//	<prefix>{<id>}:lease     STRING  id of the replica holding the session (SET NX PX); TTL = the lease
//	<prefix>{<id>}:epoch     STRING  INCR counter: the lease's epoch, its fencing token (see fence.go)
//	<prefix>{<id>}:run       STRING  JSON of session.Run, the durable state of the running prompt
//	<prefix>{<id>}:notify    channel "<replica id>" after each batch of events that replica wrote, "deleted" on Remove
//	<prefix>sessions:order   STRING  INCR counter: the sessions' Order
//	<prefix>sessions:running SET     ids of the sessions with a :run key (SaveRun adds, EndRun removes)
//	<prefix>tenant:<h>:sessions ZSET member = session id, score = Order; h = first 16 hex digits of sha256(tenant)
//	                                 (its ZCARD is the tenant's sessions: Create counts and adds in one script)
//	<prefix>tenant:<h>:prompts  ZSET member = prompt id, score = when the prompt's slot expires (unix ms, Redis's
//	                                 clock): the tenant's running prompts. Start adds (unless the tenant is at its
//	                                 limit), Renew extends with the lease, Finish and EndRun remove; members past
//	                                 their score are dropped when counted, so a lost replica's slots expire with
//	                                 its leases; the key expires with its last slot
//	<prefix>replica:<replica id>:control  channel  control messages to that replica and replies to its calls:
//	                                 {"id","from","control"} requests, {"id","reply"} replies
//
// Only :lease and the tenants' :prompts expire, and the keys of a session
// written while it has no record (racing its Remove, or after it): every
// write of :history, :stripped, :run and :events runs in a script that
// gives them orphanTTL then (orphanGuard, in fence.go). Events are written by a
// background writer in pipelined batches (AppendEvent never waits for
// Redis); each replica holds one pub/sub connection carrying its control
// channel and the notify channels of the sessions it follows.
package sessionstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/session"
)

// Options configure a Redis session store.
type Options struct {
	// KeyPrefix starts every key and channel name (e.g. "agentd:", the
	// configuration's store.redis.key_prefix).
	KeyPrefix string
	// ReplicaID names this process among the replicas; "" gives a random
	// one ("rep_" and 10 lowercase base32 characters). It must be unique
	// per process and must not be "deleted".
	ReplicaID string
	// EventBuffer is about how many events each session's stream keeps
	// (XADD MAXLEN ~, approximate trimming); <= 0 means DefaultEventBuffer.
	EventBuffer int
	// Timeout bounds each Redis operation whose context has no tighter
	// deadline; <= 0 means DefaultTimeout.
	Timeout time.Duration
	// Logger receives warnings (events not stored, lost subscriptions); nil
	// discards them.
	Logger *slog.Logger
	// MinReplicaAcks, when > 0, makes Create, Start and EndRun wait (WAIT,
	// on the session's master) until that many replicas have the session,
	// the prompt's start or its end; fewer within AckTimeout is an error
	// (ErrNotReplicated), and a session created or a prompt started so is
	// taken back.
	MinReplicaAcks int
	// AckTimeout bounds that wait; <= 0 means half of Timeout.
	AckTimeout time.Duration

	// maxQueue bounds the event writer's queue (tests lower it); <= 0
	// means defaultMaxQueue.
	maxQueue int
}

// Defaults of Options.
const (
	DefaultEventBuffer = 4096
	DefaultTimeout     = 2 * time.Second
)

const (
	// defaultMaxQueue bounds the events waiting for the writer: beyond it
	// the oldest are dropped, so a Redis outage cannot grow memory without
	// bound (the owner keeps them in its in-memory log).
	defaultMaxQueue = 100_000
	// maxBatch bounds one pipeline of the writer.
	maxBatch = 4096
	// handlerTimeout bounds the handling of one control message.
	handlerTimeout = 30 * time.Second
	// handledFor is how long a control message's id and reply are
	// remembered (longer than a Call waits: handlerTimeout and the store's
	// timeout): the same message again within it (its caller asks again
	// when the reply was lost, and go-redis resends a PUBLISH whose own
	// reply was lost) is not handled twice, and is answered again.
	handledFor = time.Minute
	// deletedPayload on a notify channel: the session was removed.
	deletedPayload = "deleted"
)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("sessionstore: closed")

// Redis is the session.Shared store on Redis (single node, Sentinel or
// Cluster through a redis.UniversalClient). See the package documentation
// for its keys.
type Redis struct {
	c       redis.UniversalClient
	cluster bool // c is a Cluster's client (noRetry)
	o       Options
	log     *slog.Logger
	id      string

	w      *writer
	fences fences

	// The tokens of this store's appends (token): a random prefix of its
	// own (a replica id may come back in a later process) and a count.
	tokenPrefix string
	tokens      atomic.Uint64

	// Pub/sub: one connection for the control channel and every followed
	// notify channel.
	ps       *redis.PubSub
	control  string
	subMu    sync.Mutex // orders SUBSCRIBE/UNSUBSCRIBE with the followers registry
	pmu      sync.Mutex
	follows  map[string]*follower                  // notify channel → follower
	confirms map[string]map[chan struct{}]struct{} // channel → Follow calls waiting for the subscription
	calls    map[string]chan session.Reply         // request id → Call waiting for the reply
	handled  map[string]*handledCall               // sender/request id → its control's handling (onControl)
	// handledOrder: handled's keys in arrival order (the oldest expire first)
	handledOrder []string
	handler      atomic.Pointer[handlerFunc]
	handlers     sync.WaitGroup
	readerEnd    chan struct{}

	ctx       context.Context // cancelled by Close: ends control handlers
	cancel    context.CancelFunc
	closed    chan struct{}
	closeOnce sync.Once
}

var _ session.Shared = (*Redis)(nil)

// NewRedis returns a store on client. It subscribes to this replica's
// control channel and waits for Redis to confirm it (bounded by
// Options.Timeout: an unreachable Redis is an error), then starts the event
// writer and the pub/sub listener; Close stops them. The client must honour
// context deadlines (redisconn.ClientOptions sets that up); the store does
// not close it.
func NewRedis(client redis.UniversalClient, o Options) (*Redis, error) {
	if client == nil {
		return nil, errors.New("sessionstore: nil Redis client")
	}
	if !redisconn.ContextTimeouts(client) {
		return nil, errors.New("sessionstore: the Redis client must be created with ContextTimeoutEnabled (see redisconn.ClientOptions), or a dead Redis could hold requests")
	}
	if o.ReplicaID == "" {
		o.ReplicaID = newReplicaID()
	}
	if o.ReplicaID == deletedPayload {
		return nil, fmt.Errorf("sessionstore: %q is not a valid replica id", o.ReplicaID)
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = DefaultEventBuffer
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.maxQueue <= 0 {
		o.maxQueue = defaultMaxQueue
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Redis{
		c: client, o: o, log: log, id: o.ReplicaID, tokenPrefix: randomHex(6) + ":",
		control:   o.KeyPrefix + "replica:" + o.ReplicaID + ":control",
		follows:   map[string]*follower{},
		confirms:  map[string]map[chan struct{}]struct{}{},
		calls:     map[string]chan session.Reply{},
		handled:   map[string]*handledCall{},
		readerEnd: make(chan struct{}),
		closed:    make(chan struct{}),
	}
	_, r.cluster = client.(*redis.ClusterClient)
	r.ctx, r.cancel = context.WithCancel(context.Background())

	ctx, cancel := context.WithTimeout(r.ctx, o.Timeout)
	defer cancel()
	r.ps = client.Subscribe(ctx, r.control)
	msg, err := r.ps.Receive(ctx)
	if err == nil {
		if s, ok := msg.(*redis.Subscription); !ok || s.Kind != "subscribe" || s.Channel != r.control {
			err = fmt.Errorf("unexpected reply %v", msg)
		}
	}
	if err != nil {
		_ = r.ps.Close()
		r.cancel()
		return nil, fmt.Errorf("sessionstore: subscribe to %s: %w", r.control, err)
	}
	go r.listen(r.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024),
		redis.WithChannelPingTimeout(o.Timeout), redis.WithChannelReconnectTimeout(o.Timeout)))

	r.w = newWriter(r)
	go r.w.run()
	return r, nil
}

// Close stops the event writer, after it has written what is queued (for
// at most Options.Timeout; what remains then is dropped), and the pub/sub
// listener. Calls waiting for a reply fail with ErrClosed. It does not
// close the client. Closing twice is harmless.
func (r *Redis) Close() error {
	var err error
	r.closeOnce.Do(func() {
		close(r.closed)
		r.w.close()
		r.cancel()
		err = r.ps.Close()
		<-r.readerEnd
		// Handlers get their context cancelled; wait for them, but not for
		// one that ignores it.
		done := make(chan struct{})
		go func() {
			r.handlers.Wait()
			close(done)
		}()
		t := time.NewTimer(r.o.Timeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			r.log.Warn("session store: control handlers still running after Close")
		}
	})
	if err != nil {
		return fmt.Errorf("sessionstore: close pub/sub: %w", err)
	}
	return nil
}

// ReplicaID implements session.Shared.
func (r *Redis) ReplicaID() string { return r.id }

// newReplicaID returns "rep_" and 10 random lowercase base32 characters.
func newReplicaID() string {
	b := make([]byte, 7)
	_, _ = rand.Read(b)
	return "rep_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))[:10]
}

// token is a new call's token (an append's, an acquire's), unique among
// every process's.
func (r *Redis) token() string {
	return r.tokenPrefix + strconv.FormatUint(r.tokens.Add(1), 36)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Keys.

func (r *Redis) key(id, kind string) string { return r.o.KeyPrefix + "{" + id + "}:" + kind }
func (r *Redis) orderKey() string           { return r.o.KeyPrefix + "sessions:order" }
func (r *Redis) runningKey() string         { return r.o.KeyPrefix + "sessions:running" }
func (r *Redis) notifyChannel(id string) string {
	return r.key(id, "notify")
}
func (r *Redis) controlChannel(replica string) string {
	return r.o.KeyPrefix + "replica:" + replica + ":control"
}
func (r *Redis) tenantKey(tenant string) string {
	h := sha256.Sum256([]byte(tenant))
	return r.o.KeyPrefix + "tenant:" + hex.EncodeToString(h[:8]) + ":sessions"
}
func (r *Redis) promptsKey(tenant string) string {
	h := sha256.Sum256([]byte(tenant))
	return r.o.KeyPrefix + "tenant:" + hex.EncodeToString(h[:8]) + ":prompts"
}

// op bounds ctx by Options.Timeout.
func (r *Redis) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.o.Timeout)
}

func wrap(what string, err error) error {
	return fmt.Errorf("sessionstore: %s: redis: %w", what, err)
}

// Lua scripts: each is one atomic step on one key.
var (
	// KEYS[1] lease, [2] epoch, [3] meta, [4] taker; ARGV[1] replica, [2]
	// ttl ms, [3] orphanTTL ms, [4] the call's token → {1, replica, epoch}
	// when taken (the epoch incremented), {0, holder} when another holds
	// it, or this replica by an earlier call. The epoch of a session
	// without a record gets orphanTTL. The token is kept as long as the
	// lease (taker): the same call run again (go-redis sends a command
	// again when its reply was lost) finds it and answers as it did.
	acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local ep = redis.call('INCR', KEYS[2])
  if redis.call('HEXISTS', KEYS[3], 'record') == 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
  redis.call('SET', KEYS[4], ARGV[4], 'PX', ARGV[2])
  return {1, ARGV[1], ep}
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] and redis.call('GET', KEYS[4]) == ARGV[4] then
  return {1, holder, tonumber(redis.call('GET', KEYS[2]))}
end
return {0, holder or ''}
`)
	// KEYS[1] lease, [2] run, [3] meta, [4] history, [5] events, [6]
	// epoch; ARGV[1] replica, [2] ttl ms, [3] run JSON, [4] the entry to
	// append ("": none) → {-1} when the session has no record (nothing
	// changes), {0, holder} when another replica holds the lease, else {1,
	// record, mutable, history length before the entry, newest event id,
	// epoch} with the lease taken (its epoch incremented), the run stored
	// and the entry appended. The same start run again (go-redis sends a
	// command again when its reply was lost) finds the lease this
	// replica's and the run its own (a run names its prompt): it answers as
	// the first run did and changes nothing.
	startScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[3], 'record') == 0 then
  return {-1}
end
local ep
local again = false
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  ep = redis.call('INCR', KEYS[6])
  redis.call('SET', KEYS[2], ARGV[3])
else
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[3] then
    return {0, holder or ''}
  end
  ep = tonumber(redis.call('GET', KEYS[6]))
  again = true
end
local m = redis.call('HMGET', KEYS[3], 'record', 'mutable')
local last = redis.call('XREVRANGE', KEYS[5], '+', '-', 'COUNT', 1)
local lastID = ''
if #last > 0 then lastID = last[1][1] end
local n = redis.call('LLEN', KEYS[4])
if ARGV[4] ~= '' then
  if again then n = n - 1 else redis.call('RPUSH', KEYS[4], ARGV[4]) end
end
return {1, m[1], m[2] or '', n, lastID, ep}
`)
	// KEYS[1] history, ARGV[1] index → 1 when the entry at index was the
	// last and is gone.
	unappendScript = redis.NewScript(`
if redis.call('LLEN', KEYS[1]) == tonumber(ARGV[1]) + 1 then
  redis.call('RPOP', KEYS[1])
  return 1
end
return 0
`)
	// The lease's own scripts check its epoch as the writes do: KEYS[1]
	// lease, [2] epoch; ARGV[1] replica, [2] epoch ("": any).
	//
	// renewScript: ARGV[3] ttl ms → 1 when extended.
	renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] and (ARGV[2] == '' or redis.call('GET', KEYS[2]) == ARGV[2]) then
  return redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 0
`)
	// releaseScript → 1 when dropped.
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] and (ARGV[2] == '' or redis.call('GET', KEYS[2]) == ARGV[2]) then
  return redis.call('DEL', KEYS[1])
end
return 0
`)
	// endRunScript: KEYS[3] run → 1 when the replica held the lease and
	// both the lease and the run are gone, 2 when neither is there (the
	// run has ended: this end's reply was lost and it runs again, or a
	// replica that took the prompt over ended it), 0 when another holds the
	// lease or a run is left without one.
	endRunScript = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] and (ARGV[2] == '' or redis.call('GET', KEYS[2]) == ARGV[2]) then
  redis.call('DEL', KEYS[3], KEYS[1])
  return 1
end
if not holder and redis.call('EXISTS', KEYS[3]) == 0 then
  return 2
end
return 0
`)
	// KEYS[1] the tenant's sessions, ARGV[1] session id, [2] order, [3]
	// max (0: no bound) → {1, sessions} when the session is added (or was:
	// the same Create run again after its reply was lost), {0, sessions}
	// when the tenant has max already (nothing changes).
	tenantAddScript = redis.NewScript(`
local n = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, n}
end
local max = tonumber(ARGV[3])
if max > 0 and n >= max then
  return {0, n}
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return {1, n + 1}
`)
	// KEYS[1] the tenant's prompts, ARGV[1] prompt id, [2] ttl ms, [3] max
	// (0: no bound) → {1, prompts} with the prompt's slot taken (or
	// extended) until now + ttl, {0, prompts} when the tenant has max
	// running already (nothing changes). Slots past their time are dropped
	// first; the key expires with its last slot. Redis's clock (TIME) times
	// the slots, not the replicas' (scripts replicate by their effects).
	slotScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
local max = tonumber(ARGV[3])
if max > 0 and n >= max and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {0, n}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return {1, redis.call('ZCARD', KEYS[1])}
`)
	// KEYS[1] the tenant's prompts, ARGV[1] prompt id, [2] the slot's time
	// (its score before EndRun's ZREM): the slot back, unless it is there with a
	// later time already (its holder renewed it meanwhile); the key expires
	// with its last slot, as slotScript has it.
	slotRestoreScript = redis.NewScript(`
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
`)
	// KEYS[1] lease, [2] run, [3] history; ARGV[1] replica, [2] the
	// history's length before the entry Start appended ("": none) → 1 when
	// the replica held the lease and the run, the lease and the entry are
	// gone: a Start taken back.
	unstartScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2], KEYS[1])
if ARGV[2] ~= '' and redis.call('LLEN', KEYS[3]) == tonumber(ARGV[2]) + 1 then
  redis.call('RPOP', KEYS[3])
end
return 1
`)
)

// Records.

// Create implements session.Shared: INCR the order counter, then, in one
// pipeline, the record and a script on the tenant index that counts the
// tenant's sessions and adds this one unless that makes more than max (two
// round trips). The index is on another hash slot than the record: a refused
// session's record is deleted again (a third round trip, for refusals
// only), as is what a failed pipeline may have left.
func (r *Redis) Create(ctx context.Context, rec session.Record, limit int) (session.CreateResult, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	n, err := r.c.Incr(ctx, r.orderKey()).Result()
	if err != nil {
		return session.CreateResult{}, wrap("create "+rec.ID, err)
	}
	rec.Order = uint64(n)
	recJSON, err := json.Marshal(rec)
	if err != nil {
		return session.CreateResult{}, fmt.Errorf("sessionstore: create %s: %w", rec.ID, err)
	}
	mutJSON, err := json.Marshal(rec.Mutable)
	if err != nil {
		return session.CreateResult{}, fmt.Errorf("sessionstore: create %s: %w", rec.ID, err)
	}
	var add *scriptCall
	err = r.pipeScripts(ctx, func(pipe redis.Pipeliner, run scriptRunner) {
		pipe.HSet(ctx, r.key(rec.ID, "meta"), "record", recJSON, "mutable", mutJSON)
		add = run(tenantAddScript, []string{r.tenantKey(rec.Tenant)}, rec.ID, rec.Order, max(limit, 0))
	})
	var added, count int64
	if err == nil {
		added, count, err = pair(add.cmd)
	}
	if err != nil || added != 1 {
		// Nothing of a session refused or not created stays behind.
		uctx, ucancel := r.op(context.WithoutCancel(ctx))
		defer ucancel()
		pipe := r.c.Pipeline()
		pipe.Del(uctx, r.key(rec.ID, "meta"))
		if err != nil {
			pipe.ZRem(uctx, r.tenantKey(rec.Tenant), rec.ID)
		}
		if _, uerr := pipe.Exec(uctx); uerr != nil {
			r.log.Warn("session store: a session not created left its record behind", "session", rec.ID, "err", uerr)
		}
	}
	if err != nil {
		return session.CreateResult{}, wrap("create "+rec.ID, err)
	}
	if added != 1 {
		return session.CreateResult{Sessions: int(count)}, nil
	}
	if err := r.ackCreate(ctx, rec.ID, rec.Tenant); err != nil {
		return session.CreateResult{}, err
	}
	return session.CreateResult{Created: true, Order: rec.Order, Sessions: int(count)}, nil
}

// pair reads a script's {int, int} reply.
func pair(cmd *redis.Cmd) (int64, int64, error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("unexpected reply %v", res)
	}
	a, ok1 := res[0].(int64)
	b, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("unexpected reply %v", res)
	}
	return a, b, nil
}

// loadCmds are the commands reading one record.
type loadCmds struct {
	id    string
	meta  *redis.SliceCmd
	count *redis.IntCmd
	last  *redis.XMessageSliceCmd
}

func (r *Redis) queueLoad(ctx context.Context, pipe redis.Pipeliner, id string) loadCmds {
	return loadCmds{
		id:    id,
		meta:  pipe.HMGet(ctx, r.key(id, "meta"), "record", "mutable"),
		count: pipe.LLen(ctx, r.key(id, "history")),
		last:  pipe.XRevRangeN(ctx, r.key(id, "events"), "+", "-", 1),
	}
}

// record decodes what queueLoad read; ok is false when the record is gone.
func (l loadCmds) record() (session.Record, bool, error) {
	vals, err := l.meta.Result()
	if err != nil {
		return session.Record{}, false, err
	}
	raw, _ := vals[0].(string)
	if raw == "" {
		return session.Record{}, false, nil
	}
	mutable, _ := vals[1].(string)
	count, err := l.count.Result()
	if err != nil {
		return session.Record{}, false, err
	}
	last, err := l.last.Result()
	if err != nil {
		return session.Record{}, false, err
	}
	lastID := ""
	if len(last) > 0 {
		lastID = last[0].ID
	}
	rec, err := decodeRecord(l.id, raw, mutable, count, lastID)
	return rec, err == nil, err
}

// decodeRecord is a session's record from its meta hash's record and
// mutable fields, its history's length and its newest event's id ("" when
// it has none).
func decodeRecord(id, raw, mutable string, count int64, lastID string) (session.Record, error) {
	var rec session.Record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return rec, fmt.Errorf("record of %s: %w", id, err)
	}
	if mutable != "" {
		rec.Mutable = session.Mutable{}
		if err := json.Unmarshal([]byte(mutable), &rec.Mutable); err != nil {
			return rec, fmt.Errorf("mutable of %s: %w", id, err)
		}
	}
	rec.MessageCount = int(count)
	if lastID != "" {
		var err error
		if rec.LastSeq, err = parseSeq(lastID); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

// Load implements session.Shared (one pipeline: the record, the history's
// length and the newest event's id).
func (r *Redis) Load(ctx context.Context, id string) (session.Record, bool, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	pipe := r.c.Pipeline()
	l := r.queueLoad(ctx, pipe, id)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return session.Record{}, false, wrap("load "+id, err)
	}
	rec, ok, err := l.record()
	if err != nil {
		return session.Record{}, false, wrap("load "+id, err)
	}
	return rec, ok, nil
}

// ListRecords implements session.Shared: the tenant index from after on,
// then the records in one pipeline. Index entries whose record is gone (a
// Remove in progress, or one that failed half-way) are skipped, and the
// page is filled from further on in the index (a few rounds at most).
func (r *Redis) ListRecords(ctx context.Context, tenant string, after uint64, limit int) ([]session.Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	ctx, cancel := r.op(ctx)
	defer cancel()
	var out []session.Record
	from := "(" + strconv.FormatUint(after, 10)
	for round := 0; len(out) < limit && round < 8; round++ {
		want := limit - len(out)
		zs, err := r.c.ZRangeByScoreWithScores(ctx, r.tenantKey(tenant), &redis.ZRangeBy{
			Min: from, Max: "+inf", Offset: 0, Count: int64(want),
		}).Result()
		if err != nil {
			return nil, wrap("list records", err)
		}
		if len(zs) == 0 {
			break
		}
		pipe := r.c.Pipeline()
		loads := make([]loadCmds, len(zs))
		for i, z := range zs {
			id, _ := z.Member.(string)
			loads[i] = r.queueLoad(ctx, pipe, id)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, wrap("list records", err)
		}
		for _, l := range loads {
			rec, ok, err := l.record()
			if err != nil {
				return nil, wrap("list records", err)
			}
			if ok {
				out = append(out, rec)
			}
		}
		from = "(" + strconv.FormatFloat(zs[len(zs)-1].Score, 'f', -1, 64)
		if len(zs) < want {
			break
		}
	}
	return out, nil
}

// Save implements session.Shared. Saving a session that does not exist
// (removed meanwhile) writes nothing.
func (r *Redis) Save(ctx context.Context, id string, m session.Mutable) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("sessionstore: save %s: %w", id, err)
	}
	ctx, cancel := r.op(ctx)
	defer cancel()
	if err := saveScript.Run(ctx, r.c, r.fencedKeys(id), r.fencedArgs(id, data)...).Err(); err != nil {
		return wrap("save "+id, r.fenced(id, err))
	}
	return nil
}

// Remove implements session.Shared: one DEL of the session's keys (one
// slot), its entries in the running set and the tenant index, then
// "deleted" on its notify channel. Events of the session still queued in
// this replica's writer are dropped.
func (r *Redis) Remove(ctx context.Context, id, tenant string) error {
	r.w.forget(id)
	r.fences.drop(id)
	ctx, cancel := r.op(ctx)
	defer cancel()
	pipe := r.c.Pipeline()
	pipe.Del(ctx, r.key(id, "meta"), r.key(id, "history"), r.key(id, "appended"), r.key(id, "stripped"),
		r.key(id, "events"), r.key(id, "lease"), r.key(id, "epoch"), r.key(id, "run"), r.key(id, "taker"))
	pipe.SRem(ctx, r.runningKey(), id)
	pipe.ZRem(ctx, r.tenantKey(tenant), id)
	pipe.Publish(ctx, r.notifyChannel(id), deletedPayload)
	if _, err := pipe.Exec(ctx); err != nil {
		return wrap("remove "+id, err)
	}
	return nil
}

// History.

// Append implements session.History (RPUSH; the index is the new length
// minus one). An append run again after its reply was lost appends
// nothing (appendScript's token).
func (r *Redis) Append(ctx context.Context, sessionID string, e session.Entry) (int64, error) {
	e.Index = 0 // the list index is the truth
	data, err := json.Marshal(e)
	if err != nil {
		return 0, fmt.Errorf("sessionstore: append to %s: %w", sessionID, err)
	}
	ctx, cancel := r.op(ctx)
	defer cancel()
	n, err := appendScript.Run(ctx, r.c, r.fencedKeys(sessionID, "history", "appended"), r.fencedArgs(sessionID, data, r.token())...).Int64()
	if err != nil {
		return 0, wrap("append to "+sessionID, r.fenced(sessionID, err))
	}
	return n - 1, nil
}

// List implements session.History.
func (r *Redis) List(ctx context.Context, sessionID string, offset, limit int) ([]session.Entry, int, error) {
	offset = max(offset, 0)
	ctx, cancel := r.op(ctx)
	defer cancel()
	key := r.key(sessionID, "history")
	pipe := r.c.Pipeline()
	var rng *redis.StringSliceCmd
	if limit > 0 {
		rng = pipe.LRange(ctx, key, int64(offset), int64(offset)+int64(limit)-1)
	}
	total := pipe.LLen(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, wrap("list history of "+sessionID, err)
	}
	if rng == nil {
		return nil, int(total.Val()), nil
	}
	raw := rng.Val()
	out := make([]session.Entry, 0, len(raw))
	for i, s := range raw {
		var e session.Entry
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			return nil, 0, fmt.Errorf("sessionstore: history of %s, entry %d: %w", sessionID, offset+i, err)
		}
		e.Index = int64(offset + i)
		out = append(out, e)
	}
	return out, int(total.Val()), nil
}

// Delete implements session.History (the history and its stripped set).
func (r *Redis) Delete(ctx context.Context, sessionID string) error {
	ctx, cancel := r.op(ctx)
	defer cancel()
	if err := r.c.Del(ctx, r.key(sessionID, "history"), r.key(sessionID, "appended"), r.key(sessionID, "stripped")).Err(); err != nil {
		return wrap("delete history of "+sessionID, err)
	}
	return nil
}

// Strip implements session.Shared.
func (r *Redis) Strip(ctx context.Context, id string, index int64) error {
	ctx, cancel := r.op(ctx)
	defer cancel()
	if err := stripScript.Run(ctx, r.c, r.fencedKeys(id, "stripped"), r.fencedArgs(id, index)...).Err(); err != nil {
		return wrap("strip "+id, r.fenced(id, err))
	}
	return nil
}

// Stripped implements session.Shared; the indexes come in increasing order.
func (r *Redis) Stripped(ctx context.Context, id string) ([]int64, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	raw, err := r.c.SMembers(ctx, r.key(id, "stripped")).Result()
	if err != nil {
		return nil, wrap("stripped of "+id, err)
	}
	out := make([]int64, 0, len(raw))
	for _, s := range raw {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("sessionstore: stripped of %s: %q: %w", id, s, err)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// Leases.

// ttlMs is ttl in whole milliseconds, rounded up, at least 1.
func ttlMs(ttl time.Duration) int64 {
	return max(1, int64((ttl+time.Millisecond-1)/time.Millisecond))
}

// Acquire implements session.Shared (SET NX PX, and the holder read in the
// same script). A replica that already holds the lease gets ok false and
// itself as holder: it extends a lease with Renew. A call run again after
// its reply was lost gets the lease it took (acquireScript's token).
func (r *Redis) Acquire(ctx context.Context, id string, ttl time.Duration) (bool, string, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	res, err := acquireScript.Run(ctx, r.c, []string{r.key(id, "lease"), r.key(id, "epoch"), r.key(id, "meta"), r.key(id, "taker")},
		r.id, ttlMs(ttl), orphanTTL.Milliseconds(), r.token()).Slice()
	if err != nil {
		return false, "", wrap("acquire "+id, err)
	}
	ok, _ := firstInt(res)
	if (ok == 1 && len(res) != 3) || (ok != 1 && len(res) != 2) {
		return false, "", fmt.Errorf("sessionstore: acquire %s: unexpected reply %v", id, res)
	}
	holder, _ := res[1].(string)
	if ok == 1 {
		epoch, _ := res[2].(int64)
		r.fences.hold(id, epoch)
	}
	return ok == 1, holder, nil
}

// Start implements session.Shared: one script on the session's slot takes
// the lease, stores the run, reads the record and appends the prompt's
// first entry, pipelined with the running set's SADD (another slot) and,
// with a prompt slot, the script taking the prompt's place among its
// tenant's (slotScript, on the tenant's hash slot): one round trip. When the script
// changed nothing (no record, or another holder), that SADD leaves an id
// the janitor's sweep drops (no holder, no run) or the holder's EndRun
// removes.
//
// The two scripts are on two hash slots and cannot wait for each other: when
// only one succeeds, a second round trip takes it back (unstartScript and
// the SREM when the tenant was at its limit, the slot's ZREM when the
// session was held or gone).
func (r *Redis) Start(ctx context.Context, id string, ttl time.Duration, run session.Run, first *session.Entry, slot session.PromptSlot, limit int) (session.StartResult, error) {
	return r.StartAlso(ctx, id, ttl, run, first, slot, limit, nil)
}

// StartAlso is Start with the commands also queues in the same pipeline,
// after Start's own (another store's, on the same client): they cost no
// round trip of their own. Their replies are theirs to read.
func (r *Redis) StartAlso(ctx context.Context, id string, ttl time.Duration, run session.Run, first *session.Entry, slot session.PromptSlot, limit int, also func(ctx context.Context, pipe redis.Pipeliner)) (session.StartResult, error) {
	data, err := json.Marshal(run)
	if err != nil {
		return session.StartResult{}, fmt.Errorf("sessionstore: start %s: %w", id, err)
	}
	var entry []byte
	if first != nil {
		e := *first
		e.Index = 0 // the list index is the truth (as Append)
		if entry, err = json.Marshal(e); err != nil {
			return session.StartResult{}, fmt.Errorf("sessionstore: start %s: %w", id, err)
		}
	}
	ctx, cancel := r.op(ctx)
	defer cancel()
	keys := []string{r.key(id, "lease"), r.key(id, "run"), r.key(id, "meta"), r.key(id, "history"), r.key(id, "events"), r.key(id, "epoch")}
	var script, slotted *scriptCall
	err = r.pipeScripts(ctx, func(pipe redis.Pipeliner, run scriptRunner) {
		if slot.Tenant != "" {
			slotted = run(slotScript, []string{r.promptsKey(slot.Tenant)}, slot.PromptID, ttlMs(ttl), max(limit, 0))
		}
		script = run(startScript, keys, r.id, ttlMs(ttl), data, entry)
		pipe.SAdd(ctx, r.runningKey(), id)
		if also != nil {
			also(ctx, pipe)
		}
	})
	// The slot: taken, refused (prompts is the tenant's count then), or
	// none asked for.
	slotTaken, prompts := slotted == nil, int64(0)
	if slotted != nil {
		if taken, n, serr := pair(slotted.cmd); serr == nil {
			slotTaken, prompts = taken == 1, n
		} else if err == nil {
			err = serr
		}
	}
	res, err := r.startResult(id, script.cmd, err)
	// Half a start is taken back: the session when the tenant is at its
	// limit (or the call failed), the slot when the session is held
	// elsewhere or gone (or the call failed).
	undoStart := res.Started && (err != nil || !slotTaken)
	undoSlot := slotted != nil && slotTaken && (err != nil || !res.Started)
	if undoStart || undoSlot {
		uctx, ucancel := r.op(context.WithoutCancel(ctx))
		defer ucancel()
		if undoStart {
			if uerr := r.unstart(uctx, id, res.Record.MessageCount, first != nil); uerr != nil {
				return session.StartResult{}, wrap("start "+id+" (taking it back)", uerr)
			}
		}
		if undoSlot {
			if uerr := r.c.ZRem(uctx, r.promptsKey(slot.Tenant), slot.PromptID).Err(); uerr != nil {
				// It expires with ttl.
				r.log.Warn("session store: the slot of a prompt that did not start stays until it expires", "session", id, "err", uerr)
			}
		}
	}
	switch {
	case err != nil:
		return session.StartResult{}, err
	case undoStart:
		return session.StartResult{Found: true, Limited: true, Prompts: int(prompts)}, nil
	}
	if res.Started {
		if aerr := r.ackStart(ctx, id, res.Epoch); aerr != nil {
			// Not acknowledged: the prompt does not start, and nothing of
			// it stays (as a session not acknowledged is taken back).
			uctx, ucancel := r.op(context.WithoutCancel(ctx))
			defer ucancel()
			if uerr := r.unstart(uctx, id, res.Record.MessageCount, first != nil); uerr != nil {
				r.log.Warn("session store: a prompt start not replicated left its lease behind (it expires)", "session", id, "err", uerr)
			}
			if slotted != nil {
				if uerr := r.c.ZRem(uctx, r.promptsKey(slot.Tenant), slot.PromptID).Err(); uerr != nil {
					r.log.Warn("session store: the slot of a prompt that did not start stays until it expires", "session", id, "err", uerr)
				}
			}
			return session.StartResult{}, wrap("start "+id, aerr)
		}
	}
	return res, nil
}

// startResult decodes startScript's reply; err is the pipeline's.
func (r *Redis) startResult(id string, cmd *redis.Cmd, err error) (session.StartResult, error) {
	reply, cerr := cmd.Slice()
	if status, _ := firstInt(reply); cerr == nil && status == 1 && len(reply) == 6 {
		// Started, whatever else failed: Start takes it back then.
		raw, _ := reply[1].(string)
		mutable, _ := reply[2].(string)
		count, _ := reply[3].(int64)
		lastID, _ := reply[4].(string)
		epoch, _ := reply[5].(int64)
		r.fences.hold(id, epoch)
		rec, derr := decodeRecord(id, raw, mutable, count, lastID)
		rec.MessageCount = int(count)
		res := session.StartResult{Found: true, Started: true, Holder: r.id, Record: rec, Epoch: uint64(epoch)}
		if derr != nil {
			return res, wrap("start "+id, derr)
		}
		if err != nil {
			return res, wrap("start "+id, err)
		}
		return res, nil
	}
	if err != nil {
		return session.StartResult{}, wrap("start "+id, err)
	}
	if cerr != nil {
		return session.StartResult{}, wrap("start "+id, cerr)
	}
	switch status, _ := firstInt(reply); {
	case status == -1 && len(reply) == 1:
		return session.StartResult{}, nil
	case status == 0 && len(reply) == 2:
		holder, _ := reply[1].(string)
		return session.StartResult{Found: true, Holder: holder}, nil
	}
	return session.StartResult{}, fmt.Errorf("sessionstore: start %s: unexpected reply %v", id, reply)
}

func firstInt(reply []any) (int64, bool) {
	if len(reply) == 0 {
		return 0, false
	}
	n, ok := reply[0].(int64)
	return n, ok
}

// unstart takes back a Start whose prompt was refused its slot: the
// session's lease, run, running set entry and first entry (at index count,
// when appended), in one round trip.
func (r *Redis) unstart(ctx context.Context, id string, count int, appended bool) error {
	index := ""
	if appended {
		index = strconv.Itoa(count)
	}
	r.fences.drop(id)
	return r.pipeScripts(ctx, func(pipe redis.Pipeliner, run scriptRunner) {
		run(unstartScript, []string{r.key(id, "lease"), r.key(id, "run"), r.key(id, "history")}, r.id, index)
		pipe.SRem(ctx, r.runningKey(), id)
	})
}

// isNoScript reports a NOSCRIPT reply: EVALSHA of a script the server does
// not have.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// Renew implements session.Shared (compare and PEXPIRE), pipelined with
// the prompt slot's extension (slotScript, on the tenant's hash slot) and
// the running set's SADD: one round trip. Both go ahead of the script's
// answer, so they happen even when the lease turns out lost: the replica
// that took the prompt over holds the same slot (the prompt's id) and the
// same entry, a slot left over expires, and an entry left over is the
// janitor's (it finds no holder and no run, and ends it). The SADD puts
// back an entry that another replica's EndRun removed while this one
// started the session's next prompt (its SREM lands after the script that
// freed the lease, and after this replica's Start): without it, a prompt
// whose replica is then lost would stay out of the janitor's sweep.
func (r *Redis) Renew(ctx context.Context, id string, ttl time.Duration, slot session.PromptSlot) (bool, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	var renew *scriptCall
	err := r.pipeScripts(ctx, func(pipe redis.Pipeliner, run scriptRunner) {
		replica, epoch := r.leaseArgs(id)
		renew = run(renewScript, []string{r.key(id, "lease"), r.key(id, "epoch")}, replica, epoch, ttlMs(ttl))
		if slot.Tenant != "" {
			run(slotScript, []string{r.promptsKey(slot.Tenant)}, slot.PromptID, ttlMs(ttl), 0)
		}
		pipe.SAdd(ctx, r.runningKey(), id)
	})
	if err != nil {
		return false, wrap("renew "+id, err)
	}
	n, err := renew.cmd.Int64()
	if err != nil {
		return false, wrap("renew "+id, err)
	}
	if n != 1 {
		r.fences.lose(id)
	}
	return n == 1, nil
}

// Occupy implements session.Shared (slotScript without a bound).
func (r *Redis) Occupy(ctx context.Context, slot session.PromptSlot, ttl time.Duration) error {
	ctx, cancel := r.op(ctx)
	defer cancel()
	if err := slotScript.Run(ctx, r.c, []string{r.promptsKey(slot.Tenant)}, slot.PromptID, ttlMs(ttl), 0).Err(); err != nil {
		return wrap("occupy a slot of "+slot.PromptID, err)
	}
	return nil
}

// Release implements session.Shared (compare and DEL).
func (r *Redis) Release(ctx context.Context, id string) error {
	ctx, cancel := r.op(ctx)
	defer cancel()
	replica, epoch := r.leaseArgs(id)
	r.fences.drop(id)
	r.w.forget(id)
	if err := releaseScript.Run(ctx, r.c, []string{r.key(id, "lease"), r.key(id, "epoch")}, replica, epoch).Err(); err != nil {
		return wrap("release "+id, err)
	}
	return nil
}

// Holder implements session.Shared.
func (r *Redis) Holder(ctx context.Context, id string) (string, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	h, err := r.c.Get(ctx, r.key(id, "lease")).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", wrap("holder of "+id, err)
	}
	return h, nil
}

// Runs.

// SaveRun implements session.Shared.
func (r *Redis) SaveRun(ctx context.Context, id string, run session.Run) error {
	data, err := json.Marshal(run)
	if err != nil {
		return fmt.Errorf("sessionstore: save run of %s: %w", id, err)
	}
	ctx, cancel := r.op(ctx)
	defer cancel()
	if err := r.pipeScripts(ctx, func(pipe redis.Pipeliner, run scriptRunner) {
		run(setRunScript, r.fencedKeys(id, "run"), r.fencedArgs(id, data)...)
		pipe.SAdd(ctx, r.runningKey(), id)
	}); err != nil {
		return wrap("save run of "+id, r.fenced(id, err))
	}
	return nil
}

// Unappend implements session.Shared (compare the length and RPOP, in one
// script).
func (r *Redis) Unappend(ctx context.Context, id string, index int64) error {
	ctx, cancel := r.op(ctx)
	defer cancel()
	if err := unappendScript.Run(ctx, r.c, []string{r.key(id, "history")}, index).Err(); err != nil {
		return wrap("unappend from "+id, err)
	}
	return nil
}

// Finish implements session.Shared: Save and the run's SET (one slot; the
// id is in the running set since Start) and the prompt slot's ZREM (on the
// tenant's hash slot) in one pipeline.
func (r *Redis) Finish(ctx context.Context, id string, m session.Mutable, run session.Run, slot session.PromptSlot) error {
	mdata, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("sessionstore: finish %s: %w", id, err)
	}
	rdata, err := json.Marshal(run)
	if err != nil {
		return fmt.Errorf("sessionstore: finish %s: %w", id, err)
	}
	ctx, cancel := r.op(ctx)
	defer cancel()
	err = r.pipeScripts(ctx, func(pipe redis.Pipeliner, run scriptRunner) {
		run(finishScript, r.fencedKeys(id, "run"), r.fencedArgs(id, mdata, rdata)...)
		if slot.Tenant != "" {
			pipe.ZRem(ctx, r.promptsKey(slot.Tenant), slot.PromptID)
		}
	})
	if err != nil {
		return wrap("finish "+id, r.fenced(id, err))
	}
	return nil
}

// scriptCall is a script's run queued on a pipeline; cmd holds its reply
// once the pipeline ran.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

// noRetry is a command that go-redis' pipeline does not send again on its
// own. A Cluster pipeline whose first command on a node fails with an
// error it retries (TRYAGAIN while a slot migrates, LOADING, a connection
// lost mid-batch) sends that node's whole batch again, its commands that
// succeeded and those it has already sent on to another node (ASK) with
// them: these then run twice, and two of its goroutines read replies into
// the same command at once (a data race the race detector caught in the
// reshard test). A batch holding one noRetry command is not sent again:
// pipeScripts runs again just the scripts a node refused (runMoved), and
// MOVED and ASK are still followed, command by command. (One
// server's or Sentinel's pipeline runs on one connection, sequentially:
// its scripts keep go-redis' retries.)
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// evalSha is script's EVALSHA of keys and args, not queued.
func evalSha(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return redis.NewCmd(ctx, append(a, args...)...)
}

// scriptRunner queues a script's run on the pipeline.
type scriptRunner func(script *redis.Script, keys []string, args ...any) *scriptCall

// pipeScripts runs, in one pipeline, the commands queue queues, its scripts
// by their SHA (EVALSHA). The scripts the server does not have (NOSCRIPT: a
// restart, a failover) run again with their text, as Script.Run does, in a
// second pipeline: only they, so that nothing runs twice. It returns the
// first error of a command, as Exec does, but for a NOSCRIPT of a script
// queued on pipe directly (another store's: its caller reads that reply).
func (r *Redis) pipeScripts(ctx context.Context, queue func(pipe redis.Pipeliner, run scriptRunner)) error {
	pipe := r.c.Pipeline()
	var calls []*scriptCall
	queued := map[*redis.Cmd]*scriptCall{} // each script's first command → its call
	queue(pipe, func(script *redis.Script, keys []string, args ...any) *scriptCall {
		c := &scriptCall{script: script, keys: keys, args: args, cmd: evalSha(ctx, script, keys, args)}
		if r.cluster {
			_ = pipe.Process(ctx, noRetry{c.cmd})
		} else {
			_ = pipe.Process(ctx, c.cmd)
		}
		calls = append(calls, c)
		queued[c.cmd] = c
		return c
	})
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	var redo []*scriptCall
	for _, c := range calls {
		if isNoScript(c.cmd.Err()) {
			redo = append(redo, c)
		}
	}
	if len(redo) > 0 {
		pipe = r.c.Pipeline()
		for _, c := range redo {
			c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	var lost []redis.Cmder
	if r.cluster {
		for _, cmd := range cmds {
			if rc, ok := cmd.(noRetry); !ok || queued[rc.Cmd] == nil {
				if lostConn(cmd.Err()) {
					lost = append(lost, cmd)
				}
			}
		}
	}
	r.runMoved(ctx, calls, lost)
	// Each command's error, in the pipeline's order, a script's from its
	// last run. A NOSCRIPT of a command queued without run (another
	// store's, see StartAlso) is its own to handle.
	for _, cmd := range cmds {
		if nr, ok := cmd.(noRetry); ok {
			cmd = nr.Cmd
		}
		if rc, ok := cmd.(*redis.Cmd); ok && queued[rc] != nil {
			if err := queued[rc].cmd.Err(); err != nil {
				return err
			}
			continue
		}
		if err := cmd.Err(); err != nil && !isNoScript(err) {
			return err
		}
	}
	return nil
}

// runMoved runs again, on a Cluster, the scripts of calls a node refused
// because their slot is moving or moved (TRYAGAIN while a reshard splits
// their keys between two masters, MOVED or ASK past go-redis' redirects,
// CLUSTERDOWN): those did not run. Only they run again (noRetry keeps
// go-redis from sending the rest of their pipeline twice), backing off
// 8 → 128 ms, until they run or ctx ends: a slot's move costs the write a
// pause, not a failure. So do the scripts and the other commands (lost)
// whose connection was lost before their reply came: they may have run,
// and agentd's scripts are safe to run twice (an append's token, a start
// that finds its own run, …), as are the commands it pipelines with them
// (SADD, SREM, ZREM, ZSCORE, PUBLISH).
func (r *Redis) runMoved(ctx context.Context, calls []*scriptCall, lost []redis.Cmder) {
	if !r.cluster {
		return
	}
	for backoff := 8 * time.Millisecond; ; backoff = min(2*backoff, 128*time.Millisecond) {
		var again []*scriptCall
		for _, c := range calls {
			// The new master may not have the script yet (NOSCRIPT).
			if err := c.cmd.Err(); slotElsewhere(err) || isNoScript(err) || lostConn(err) {
				again = append(again, c)
			}
		}
		lost = slices.DeleteFunc(lost, func(cmd redis.Cmder) bool { return !lostConn(cmd.Err()) })
		if len(again) == 0 && len(lost) == 0 {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		pipe := r.c.Pipeline()
		for _, c := range again {
			if isNoScript(c.cmd.Err()) {
				c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
				continue
			}
			c.cmd = evalSha(ctx, c.script, c.keys, c.args)
			_ = pipe.Process(ctx, noRetry{c.cmd})
		}
		for _, cmd := range lost {
			_ = pipe.Process(ctx, noRetryCmder{cmd})
		}
		_, _ = pipe.Exec(ctx)
	}
}

// noRetryCmder is noRetry for a command of any type.
type noRetryCmder struct{ redis.Cmder }

func (noRetryCmder) NoRetry() bool { return true }

// lostConn reports the error of a command whose connection was lost
// before its reply came (it may have run).
func lostConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// LoadRun implements session.Shared.
func (r *Redis) LoadRun(ctx context.Context, id string) (session.Run, bool, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	data, err := r.c.Get(ctx, r.key(id, "run")).Bytes()
	if errors.Is(err, redis.Nil) {
		return session.Run{}, false, nil
	}
	if err != nil {
		return session.Run{}, false, wrap("load run of "+id, err)
	}
	var run session.Run
	if err := json.Unmarshal(data, &run); err != nil {
		return session.Run{}, false, fmt.Errorf("sessionstore: run of %s: %w", id, err)
	}
	return run, true, nil
}

// EndRun implements session.Shared: when this replica holds the lease,
// endRunScript drops the run state and the lease (the session's slot),
// pipelined with the running set's SREM and the prompt slot's ZREM (on the
// tenant's slot): one round trip. The three are on
// three hash slots and cannot wait for each other, so the two on other
// slots go ahead of the script's answer; when it says this replica did not
// hold the lease (a replica that took the prompt over holds the session and
// the slot), or its outcome is unknown, a second round trip puts back what
// they took (the id in the set, the slot with its time), if anything. With
// Options.MinReplicaAcks the script waits for its replicas first (WAIT, on
// its own connection), and the set and the slot follow once it ended the
// run, as their own pipeline.
func (r *Redis) EndRun(ctx context.Context, id string, slot session.PromptSlot) error {
	ctx, cancel := r.op(ctx)
	defer cancel()
	if r.o.MinReplicaAcks > 0 {
		return r.endRunAcked(ctx, id, slot)
	}
	keys := []string{r.key(id, "lease"), r.key(id, "epoch"), r.key(id, "run")}
	replica, epoch := r.leaseArgs(id)
	r.fences.drop(id)
	var end *scriptCall
	var left, freed *redis.IntCmd
	var was *redis.FloatCmd
	err := r.pipeScripts(ctx, func(pipe redis.Pipeliner, run scriptRunner) {
		end = run(endRunScript, keys, replica, epoch)
		left = pipe.SRem(ctx, r.runningKey(), id)
		if slot.Tenant != "" {
			// The slot's time, then the slot, in a row on one connection
			// (Finish has freed it already, unless it failed).
			was = pipe.ZScore(ctx, r.promptsKey(slot.Tenant), slot.PromptID)
			freed = pipe.ZRem(ctx, r.promptsKey(slot.Tenant), slot.PromptID)
		}
	})
	if errors.Is(err, redis.Nil) {
		// ZSCORE of a slot that is not there (Finish freed it): the other
		// commands' errors are theirs.
		err = cmp.Or(left.Err(), freed.Err())
	}
	n, nerr := end.cmd.Int64()
	if nerr == nil && n >= 1 {
		if err != nil {
			// The set's entry: the janitor's sweep finds the id without a
			// holder nor a run and ends it again; the slot expires.
			return wrap("end run of "+id, err)
		}
		return nil
	}
	// What the pipeline took, put back: the set's entry when SREM removed
	// one (or may have), the slot when ZREM removed one.
	removed := left.Err() != nil || left.Val() == 1
	score := ""
	if freed != nil && freed.Val() == 1 && was.Err() == nil {
		score = strconv.FormatFloat(was.Val(), 'f', -1, 64)
	}
	var uerr error
	if removed || score != "" {
		uctx, ucancel := r.op(context.WithoutCancel(ctx))
		defer ucancel()
		uerr = r.pipeScripts(uctx, func(pipe redis.Pipeliner, run scriptRunner) {
			if removed {
				pipe.SAdd(uctx, r.runningKey(), id)
			}
			if score != "" {
				run(slotRestoreScript, []string{r.promptsKey(slot.Tenant)}, slot.PromptID, score)
			}
		})
	}
	switch {
	case nerr != nil:
		if err == nil {
			err = nerr
		}
		return wrap("end run of "+id, err)
	case uerr != nil:
		// An id left out of the set is the holder's until its EndRun or
		// SaveRun; a slot left out lets its tenant one prompt more until
		// the holder's next renewal puts it back.
		return wrap("end run of "+id+" (putting back the holder's running entry and slot)", uerr)
	}
	return nil
}

// endRunAcked is EndRun with Options.MinReplicaAcks: endRunScript and WAIT
// on the lease's master, then, when it ended the run, the set's SREM and
// the slot's ZREM (one pipeline); otherwise nothing changes.
func (r *Redis) endRunAcked(ctx context.Context, id string, slot session.PromptSlot) error {
	n, ackErr, err := r.endRun(ctx, id)
	if err != nil {
		return wrap("end run of "+id, err)
	}
	if n == 0 {
		return nil
	}
	// Should this fail, the janitor's sweep finds the id without a holder
	// nor a run and ends it again, and the slot expires.
	pipe := r.c.Pipeline()
	pipe.SRem(ctx, r.runningKey(), id)
	if slot.Tenant != "" {
		pipe.ZRem(ctx, r.promptsKey(slot.Tenant), slot.PromptID)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return wrap("end run of "+id, err)
	}
	return ackErr
}

// Running implements session.Shared; the ids come sorted.
func (r *Redis) Running(ctx context.Context) ([]string, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	ids, err := r.c.SMembers(ctx, r.runningKey()).Result()
	if err != nil {
		return nil, wrap("running sessions", err)
	}
	slices.Sort(ids)
	return ids, nil
}
