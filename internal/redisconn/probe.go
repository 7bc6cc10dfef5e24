package redisconn

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The readiness probe.
const (
	// ProbeTimeout bounds one probe.
	ProbeTimeout = time.Second
	// ProbeCache is how long Writable answers from the last probe.
	ProbeCache = time.Second
	// probeKeyTTL is the life of a probe key.
	probeKeyTTL = 10 * time.Second
	// numSlots is a Cluster's number of hash slots.
	numSlots = 16384
)

// NotWritableError is why the probe could not write.
type NotWritableError struct {
	// Reason is READONLY, MOVED, CLUSTERDOWN, LOADING, NOAUTH, timeout,
	// unreachable, … (a Redis error's first word, or what failed).
	Reason string
	// Node is the Cluster master the write went to ("" otherwise).
	Node string
	// Hint says what to check, when there is something to say.
	Hint string
	Err  error
}

func (e *NotWritableError) Error() string {
	s := e.Reason
	if e.Node != "" {
		s += " on " + e.Node
	}
	s += ": " + e.Err.Error()
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

func (e *NotWritableError) Unwrap() error { return e.Err }

// ShortOfReplicasError: the probe wrote, but fewer replicas than
// Options.MinReplicaAcks acknowledged the write in time (Redis' own word
// for it is NOREPLICAS). The store takes writes, yet refuses new sessions
// and prompts on that master (of their slots, in a Cluster) until enough
// replicas are in sync: a fault of the whole fleet's store, not of one
// replica of agentd.
type ShortOfReplicasError struct {
	// Node is the Cluster master short of replicas ("" otherwise).
	Node string
	// Acked of Want replicas acknowledged within Within.
	Acked, Want int
	Within      time.Duration
}

func (e *ShortOfReplicasError) Error() string {
	s := "NOREPLICAS"
	if e.Node != "" {
		s += " on " + e.Node
	}
	return s + ": " + strconv.Itoa(e.Acked) + " of " + strconv.Itoa(e.Want) + " replicas acknowledged the probe's write within " +
		e.Within.String() + " (store.redis.min_replica_acks: new sessions and prompts are refused until the master has that many replicas in sync)"
}

// StoreDegraded marks the error as a store that writes, short of what it
// should (a caller that knows no redisconn type tells it so).
func (e *ShortOfReplicasError) StoreDegraded() bool { return true }

// prober caches the probe's answer.
type prober struct {
	c    *Conn
	id   string // this process' probe keys
	tags sync.Map

	mu  sync.Mutex
	at  time.Time
	err error
}

func (p *prober) init(c *Conn) {
	p.c, p.id = c, newID()
}

// Writable reports whether the store can write now: nil, a
// *NotWritableError, or (with Options.MinReplicaAcks) a
// *ShortOfReplicasError when it writes but too few replicas acknowledge.
// It answers from the last probe for ProbeCache, so that readiness checks
// cost Redis little; calls during a probe wait for it (at most
// ProbeTimeout).
func (c *Conn) Writable(ctx context.Context) error {
	p := &c.probe
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < ProbeCache {
		return p.err
	}
	// The caller going away does not make the store unwritable.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ProbeTimeout)
	defer cancel()
	p.err, p.at = c.Probe(pctx), time.Now()
	return p.err
}

// Probe writes a key of this process with a short TTL (SET PX): on the
// server (Single, Sentinel's master) or on every master of a Cluster. With
// Options.MinReplicaAcks, that many replicas of each master must then
// acknowledge the write (WAIT, on the connection that wrote): the store's
// own writes ask as much of a session's creation and a prompt's start, so
// a master with fewer replicas in sync is one that refuses them. It
// returns nil, a *NotWritableError or a *ShortOfReplicasError. A single
// server that turns out to be a Cluster node fails it with MOVED, even
// when the probe's own key is in one of its slots.
func (c *Conn) Probe(ctx context.Context) error {
	if c.topology == Cluster {
		return c.probeCluster(ctx)
	}
	pipe := c.client.Pipeline()
	set := pipe.Set(ctx, c.o.KeyPrefix+"probe:"+c.probe.id, "1", probeKeyTTL)
	wait := c.queueWait(ctx, pipe)
	info := pipe.Info(ctx, "cluster")
	_, execErr := pipe.Exec(ctx)
	if err := setErr(set, execErr); err != nil {
		return c.notWritable(err, "")
	}
	if strings.Contains(info.Val(), "cluster_enabled:1") {
		return c.notWritable(errors.New("MOVED: the server is a Redis Cluster node, whose other slots answer MOVED"), "")
	}
	return c.acknowledged(wait, "")
}

// probeCluster writes a key in the first slot of each master's ranges, as
// the Cluster client routes it (or, should that slot be moving, in its
// last).
func (c *Conn) probeCluster(ctx context.Context) error {
	//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; CLUSTER SLOTS answers on every supported Redis
	slots, err := c.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return c.notWritable(err, "")
	}
	covered := 0
	// master → two slots it serves: the first of its first range and the
	// last of its last (a reshard moves a master's slots from the lowest
	// up, so when the one is moving the other is not).
	ends := map[string][]int{}
	for _, s := range slots {
		covered += int(s.End-s.Start) + 1
		if len(s.Nodes) == 0 {
			continue
		}
		addr := s.Nodes[0].Addr
		if _, ok := ends[addr]; !ok {
			ends[addr] = []int{int(s.Start), int(s.End)}
		}
		ends[addr][1] = int(s.End)
	}
	if covered < numSlots {
		return &NotWritableError{Reason: "CLUSTERDOWN", Err: errorf("%d of %d slots are served", covered, numSlots),
			Hint: "the Cluster does not cover every slot"}
	}
	errs := make(chan error, len(ends))
	var wg sync.WaitGroup
	for addr, slots := range ends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			for _, slot := range slots {
				key := c.o.KeyPrefix + "probe:{" + c.probe.tag(slot) + "}:" + c.probe.id
				if err = c.probeMaster(ctx, key, addr); !slotMoving(err) {
					break
				}
				// The slot is moving or moved since CLUSTER SLOTS: the
				// master's other one tells.
				c.cluster.ReloadState(ctx)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	// A master that cannot write says more than one short of replicas.
	var short error
	for err := range errs {
		var sr *ShortOfReplicasError
		if !errors.As(err, &sr) {
			return err
		}
		short = err
	}
	return short // nil when none failed
}

// probeMaster writes key on the Cluster master of its slot (addr, as
// CLUSTER SLOTS named it) and, with Options.MinReplicaAcks, waits for
// that master's replicas: WAIT counts the replicas of the node it runs on
// for the writes of its connection, so both go to the slot's master in
// one pipeline.
func (c *Conn) probeMaster(ctx context.Context, key, addr string) error {
	if c.o.MinReplicaAcks <= 0 {
		if err := c.cluster.Set(ctx, key, "1", probeKeyTTL).Err(); err != nil {
			return c.notWritable(err, addr)
		}
		return nil
	}
	node, err := c.cluster.MasterForKey(ctx, key)
	if err != nil {
		return c.notWritable(err, addr)
	}
	pipe := node.Pipeline()
	set := pipe.Set(ctx, key, "1", probeKeyTTL)
	wait := c.queueWait(ctx, pipe)
	_, execErr := pipe.Exec(ctx)
	if err := setErr(set, execErr); err != nil {
		return c.notWritable(err, addr)
	}
	return c.acknowledged(wait, addr)
}

// setErr is the failure of the probe's SET: its own error, or, when it
// has no reply, the pipeline's (a connection that could not be set up,
// e.g. its AUTH refused, fails the pipeline without failing its commands).
func setErr(set *redis.StatusCmd, execErr error) error {
	if err := set.Err(); err != nil {
		return err
	}
	if set.Val() != "OK" {
		if execErr != nil {
			return execErr
		}
		return errorf("no reply to the probe's SET")
	}
	return nil
}

// slotMoving reports a probe that met a slot leaving its master (with
// Options.MinReplicaAcks the probe runs on the master's own client, which
// follows no redirection): MOVED, ASK, TRYAGAIN.
func slotMoving(err error) bool {
	var nw *NotWritableError
	if !errors.As(err, &nw) {
		return false
	}
	switch nw.Reason {
	case "MOVED", "ASK", "TRYAGAIN":
		return true
	}
	return false
}

// waitBound is how long the probe's WAIT waits for replicas: half the
// store's timeout (as the store's own acknowledgements wait), at most half
// the probe's.
func (c *Conn) waitBound() time.Duration {
	return max(min(c.timeout, ProbeTimeout)/2, time.Millisecond)
}

// queueWait queues WAIT Options.MinReplicaAcks on pipe; nil without it.
func (c *Conn) queueWait(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	if c.o.MinReplicaAcks <= 0 {
		return nil
	}
	return pipe.Do(ctx, "wait", c.o.MinReplicaAcks, c.waitBound().Milliseconds())
}

// acknowledged is the probe's verdict on its WAIT (nil: none was asked):
// a *ShortOfReplicasError when fewer than Options.MinReplicaAcks
// acknowledged the write in time.
func (c *Conn) acknowledged(wait *redis.Cmd, node string) error {
	if wait == nil {
		return nil
	}
	n, err := wait.Int64()
	if err != nil {
		return c.notWritable(err, node)
	}
	if n < int64(c.o.MinReplicaAcks) {
		return &ShortOfReplicasError{Node: node, Acked: int(n), Want: c.o.MinReplicaAcks, Within: c.waitBound()}
	}
	return nil
}

// notWritable classifies a failed write.
func (c *Conn) notWritable(err error, node string) *NotWritableError {
	e := &NotWritableError{Reason: reason(err), Node: node, Err: err}
	switch e.Reason {
	case "MOVED", "ASK":
		if c.topology != Cluster {
			e.Hint = "the server is a Redis Cluster node: set store.redis.cluster: true and list its nodes in store.redis.addrs"
		}
	case "READONLY":
		switch c.topology {
		case Single:
			e.Hint = "the server is a replica: point store.redis.addr at the master, or name it through Sentinel (store.redis.master_name, store.redis.addrs)"
		case Sentinel:
			e.Hint = "the master the Sentinels name is read-only: a failover is under way"
		default:
			e.Hint = "the slot's node is a replica: a failover is under way"
		}
	case "CLUSTERDOWN":
		e.Hint = "a master failed and no replica has taken its slots over yet, or the Cluster lost its majority"
	case "NOAUTH", "WRONGPASS":
		e.Hint = "check store.redis.username and store.redis.password_env"
	case "timeout":
		e.Hint = "no answer within " + ProbeTimeout.String()
	case "MASTERDOWN":
		e.Hint = "the replica lost its master"
	case "OOM":
		e.Hint = "Redis is at its maxmemory and refuses writes (maxmemory-policy noeviction): raise maxmemory, or free memory"
	}
	return e
}

// reason is a failed call's short name: the Redis error's first word, or
// timeout, unreachable, closed, error.
func reason(err error) string {
	var re redis.Error
	if errors.As(err, &re) {
		word, _, _ := strings.Cut(strings.TrimPrefix(re.Error(), "-"), " ")
		if word != "" && word == strings.ToUpper(word) {
			return word
		}
		return "error"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" || strings.Contains(err.Error(), "connection refused") {
		return "unreachable"
	}
	if errors.Is(err, redis.ErrClosed) {
		return "closed"
	}
	if word, _, _ := strings.Cut(err.Error(), ":"); word == "MOVED" {
		return "MOVED"
	}
	return "error"
}

// tag is a hash tag whose keys are in slot.
func (p *prober) tag(slot int) string {
	if t, ok := p.tags.Load(slot); ok {
		return t.(string)
	}
	for i := 0; ; i++ {
		t := "p" + strconv.Itoa(i)
		if int(crc16(t)%numSlots) == slot {
			p.tags.Store(slot, t)
			return t
		}
	}
}

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
