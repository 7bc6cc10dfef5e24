package redisconn

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// No healing goroutine outlives its Conn, no client goroutine its test.
// go-redis' own log (a dial that failed, a new master) stays out of the
// output.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	redistest.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func newConn(t *testing.T, o Options) *Conn {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Every topology gets bounded timeouts (the default when unset) and
// context deadlines, which the stores require.
func TestTimeouts(t *testing.T) {
	for _, o := range []Options{
		{Addr: "127.0.0.1:1"},
		{Addrs: []string{"127.0.0.1:1"}, Cluster: true},
		{Addrs: []string{"127.0.0.1:1"}, MasterName: "m"},
		{Addr: "127.0.0.1:1", Timeout: 250 * time.Millisecond},
	} {
		c := newConn(t, o)
		want := o.Timeout
		if want == 0 {
			want = DefaultTimeout
		}
		if c.Timeout() != want {
			t.Errorf("%s: Timeout() = %v, want %v", c.Topology(), c.Timeout(), want)
		}
		if !ContextTimeouts(c.Client()) {
			t.Errorf("%s: the client ignores context deadlines", c.Topology())
		}
		var got [4]time.Duration
		switch cl := c.Client().(type) {
		case *redis.Client:
			op := cl.Options()
			got = [4]time.Duration{op.DialTimeout, op.ReadTimeout, op.WriteTimeout, op.PoolTimeout}
		case *redis.ClusterClient:
			op := cl.Options()
			got = [4]time.Duration{op.DialTimeout, op.ReadTimeout, op.WriteTimeout, op.PoolTimeout}
			if op.ClusterStateReloadInterval != ClusterReloadInterval || op.ReadOnly {
				t.Errorf("cluster: reload every %v, read-only %v", op.ClusterStateReloadInterval, op.ReadOnly)
			}
		}
		for i, d := range got {
			if d != want {
				t.Errorf("%s: timeout %d = %v, want %v", c.Topology(), i, d, want)
			}
		}
	}
}

func TestFromConfig(t *testing.T) {
	t.Setenv("T_REDIS_PW", "s3cret-pw")
	cfg, err := config.Parse(strings.NewReader(`
store:
  backend: redis
  redis: {addrs: ["127.0.0.1:7000", "127.0.0.1:7001"], cluster: true, password_env: T_REDIS_PW, timeout_ms: 300}
`))
	if err != nil {
		t.Fatal(err)
	}
	o := FromConfig(cfg.Store.Redis)
	if !o.Cluster || len(o.Addrs) != 2 || o.Password != "s3cret-pw" || o.Timeout != 300*time.Millisecond || o.KeyPrefix != "agentd:" {
		t.Fatalf("FromConfig = %+v", o)
	}
}

// The probe writes; it fails, naming why, once the server is gone, and
// answers from its cache for ProbeCache.
func TestProbeSingle(t *testing.T) {
	srv := redistest.Start(t)
	c := newConn(t, Options{Addr: srv.Addr(), KeyPrefix: "t:"})
	ctx := testkit.ContextFor(t, 10*time.Second)
	if err := c.Writable(ctx); err != nil {
		t.Fatalf("Writable = %v", err)
	}
	keys, err := c.Client().Keys(ctx, "t:probe:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("probe keys %v, %v", keys, err)
	}
	if ttl := c.Client().PTTL(ctx, keys[0]).Val(); ttl <= 0 || ttl > probeKeyTTL {
		t.Errorf("probe key TTL %v", ttl)
	}
	srv.Kill()
	if err := c.Writable(ctx); err != nil {
		t.Fatalf("Writable within ProbeCache = %v, want the cached nil", err)
	}
	start := time.Now()
	err = c.Probe(ctx)
	var nw *NotWritableError
	if !errors.As(err, &nw) || nw.Reason != "unreachable" {
		t.Fatalf("Probe with the server gone = %v, want unreachable", err)
	}
	if d := time.Since(start); d > ProbeTimeout {
		t.Errorf("the probe took %v", d)
	}
}

// A server with a maxmemory and an evicting policy is told (Evicting
// names the policy); noeviction or no maxmemory is not; and a server at
// its maxmemory under noeviction fails the probe with OOM and a hint.
func TestEvicting(t *testing.T) {
	ctx := testkit.Context(t)
	lru := newConn(t, Options{Addr: redistest.StartWith(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru").Addr()})
	err := lru.Evicting(ctx)
	var ev *EvictingError
	if !errors.As(err, &ev) || ev.Policy != "volatile-lru" || ev.MaxMemory != 100<<20 ||
		!strings.Contains(err.Error(), "set maxmemory-policy noeviction") {
		t.Fatalf("Evicting with volatile-lru = %v", err)
	}
	unbounded := newConn(t, Options{Addr: redistest.StartWith(t, "--maxmemory-policy", "allkeys-lru").Addr()})
	if err := unbounded.Evicting(ctx); err != nil {
		t.Errorf("Evicting without maxmemory = %v", err)
	}
	srv := redistest.StartWith(t, "--maxmemory", "100mb", "--maxmemory-policy", "noeviction")
	full := newConn(t, Options{Addr: srv.Addr()})
	if err := full.Evicting(ctx); err != nil {
		t.Errorf("Evicting with noeviction = %v", err)
	}
	if err := full.Client().ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	err = full.Probe(ctx)
	var nw *NotWritableError
	if !errors.As(err, &nw) || nw.Reason != "OOM" || !strings.Contains(err.Error(), "raise maxmemory") {
		t.Fatalf("Probe of a full server = %v", err)
	}
}

// A single address on a replica: READONLY, and a hint to name the master
// (through Sentinel).
func TestProbeReplica(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t)
	ctx := testkit.ContextFor(t, 10*time.Second)
	mc := newConn(t, Options{Addr: replica.Addr()})
	if err := mc.Client().ReplicaOf(ctx, "127.0.0.1", strings.TrimPrefix(master.Addr(), "127.0.0.1:")).Err(); err != nil {
		t.Fatal(err)
	}
	err := mc.Probe(ctx)
	var nw *NotWritableError
	if !errors.As(err, &nw) || nw.Reason != "READONLY" || !strings.Contains(err.Error(), "store.redis.master_name") {
		t.Fatalf("Probe on a replica = %v", err)
	}
}

// On a Cluster: a single address (cluster: false) is not writable, naming
// MOVED and store.redis.cluster; the Cluster client writes again soon after
// a master is killed and its replica promoted, and the probe says so.
func TestClusterMasterKilled(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testkit.ContextFor(t, 60*time.Second)

	single := newConn(t, Options{Addr: cl.Nodes[0].Addr(), KeyPrefix: "t:"})
	err := single.Probe(ctx)
	var nw *NotWritableError
	if !errors.As(err, &nw) || nw.Reason != "MOVED" || !strings.Contains(err.Error(), "store.redis.cluster: true") {
		t.Fatalf("Probe of one Cluster node as a single server = %v", err)
	}

	c := newConn(t, Options{Addrs: cl.Addrs()[:2], Cluster: true, KeyPrefix: "t:"})
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("Probe = %v", err)
	}
	// With min_replica_acks, each master's replica acknowledges the probe.
	acked := newConn(t, Options{Addrs: cl.Addrs()[:2], Cluster: true, KeyPrefix: "t:", MinReplicaAcks: 1})
	redistest.Eventually(ctx, t, "every master's replica acknowledges the probe", func(ctx context.Context) (bool, error) {
		err := acked.Probe(ctx)
		return err == nil, err
	})
	// Every master is asked of its eviction policy.
	if err := c.Evicting(ctx); err != nil {
		t.Fatalf("Evicting = %v", err)
	}
	lfu := redistest.Client(t, cl.Masters(ctx)[1].Addr())
	if err := lfu.ConfigSet(ctx, "maxmemory", "1gb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Evicting(ctx); err != nil {
		t.Fatalf("Evicting with a maxmemory and the default policy (noeviction) = %v", err)
	}
	if err := lfu.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
		t.Fatal(err)
	}
	var ev *EvictingError
	if err := c.Evicting(ctx); !errors.As(err, &ev) || ev.Node != lfu.Options().Addr || ev.Policy != "allkeys-lfu" {
		t.Fatalf("Evicting with allkeys-lfu on one master = %v", err)
	}
	if err := lfu.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	const key = "t:{ses_k}:meta"
	if err := c.Client().Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := cl.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cl.Kill(old)

	var promoted atomic.Int64
	var successor *redistest.Server
	done := make(chan struct{})
	go func() {
		defer close(done)
		successor = cl.WaitFailover(ctx, key, old)
		promoted.Store(int64(time.Since(killed)))
	}()
	failures := 0
	var probeErr error
	for {
		wctx, cancel := context.WithTimeout(ctx, c.Timeout())
		err := c.Client().Set(wctx, key, "v2", 0).Err()
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no write on the killed master's slot before the deadline: %v", err)
		}
		failures++
		if probeErr == nil {
			probeErr = c.Probe(ctx)
		}
	}
	recovered := time.Since(killed)
	<-done
	t.Logf("killed master %s: writes on its slot again after %v (replica promoted after %v, %d writes failed meanwhile)",
		old.Addr(), recovered.Round(time.Millisecond), time.Duration(promoted.Load()).Round(time.Millisecond), failures)
	if recovered > 15*time.Second {
		t.Errorf("writes resumed after %v, want well under the 40-50 s of a 60 s slot map reload", recovered)
	}
	if p := time.Duration(promoted.Load()); recovered > p+ClusterReloadInterval+2*time.Second {
		t.Errorf("writes resumed %v after the promotion", recovered-p)
	}
	if failures > 0 && probeErr == nil {
		t.Error("the probe said writable while writes failed")
	}
	if c.heals.Load() == 0 {
		t.Error("no slot map reload was triggered by the failed calls")
	}
	redistest.Eventually(ctx, t, "the probe writes on every master", func(ctx context.Context) (bool, error) {
		err := c.Probe(ctx)
		return err == nil, err
	})
	// The promoted replica has no replica of its own: with
	// min_replica_acks it is a master short of replicas, named.
	redistest.Eventually(ctx, t, "the probe names the master without a replica", func(ctx context.Context) (bool, error) {
		err := acked.Probe(ctx)
		var sr *ShortOfReplicasError
		return errors.As(err, &sr) && sr.Node == successor.Addr() && sr.Acked == 0 && sr.Want == 1 &&
			strings.HasPrefix(err.Error(), "NOREPLICAS on "+successor.Addr()+": 0 of 1 replicas"), err
	})
}

// With min_replica_acks the probe writes on each master's own client,
// which follows no redirection: while a reshard moves the slot it probes
// (its key already on the new master, ASK), or right after (MOVED), the
// probe writes in the master's other slot instead, and the store stays
// ready.
func TestProbeThroughSlotMove(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testkit.ContextFor(t, 60*time.Second)
	c := newConn(t, Options{Addrs: cl.Addrs(), Cluster: true, KeyPrefix: "t:", MinReplicaAcks: 1})
	redistest.Eventually(ctx, t, "every master's replica acknowledges the probe", func(ctx context.Context) (bool, error) {
		err := c.Probe(ctx)
		return err == nil, err
	})
	slots, err := c.Client().ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := int(slots[0].Start)
	for _, s := range slots {
		if s.Nodes[0].Addr == slots[0].Nodes[0].Addr {
			slot = min(slot, int(s.Start))
		}
	}
	from, to := cl.Node(slots[0].Nodes[0].Addr), (*redistest.Server)(nil)
	for _, m := range cl.Masters(ctx) {
		if m != from {
			to = m
		}
	}
	key := "t:probe:{" + c.probe.tag(slot) + "}:" + c.probe.id
	moving := true
	cl.MoveSlot(ctx, slot, to, 10, func() {
		if !moving {
			return
		}
		moving = false
		cl.Migrate(ctx, from, to, key)
		if err := c.Probe(ctx); err != nil {
			t.Errorf("Probe while its slot migrates, its key moved = %v", err)
		}
	})
	if err := c.Probe(ctx); err != nil {
		t.Errorf("Probe right after its slot moved = %v", err)
	}
}

// With min_replica_acks the probe's write must be acknowledged by that
// many replicas (WAIT): a master alone, or whose replica died, is short
// of replicas (NOREPLICAS); with its replica in sync it is not.
func TestProbeReplicaAcks(t *testing.T) {
	master := redistest.StartWith(t, "--repl-diskless-sync-delay", "0") // a replica syncs at once
	ctx := testkit.ContextFor(t, 20*time.Second)
	c := newConn(t, Options{Addr: master.Addr(), KeyPrefix: "t:", MinReplicaAcks: 1, Timeout: 200 * time.Millisecond})
	short := func(what string) {
		t.Helper()
		err := c.Probe(ctx)
		var sr *ShortOfReplicasError
		if !errors.As(err, &sr) || sr.Node != "" ||
			err.Error() != "NOREPLICAS: 0 of 1 replicas acknowledged the probe's write within 100ms "+
				"(store.redis.min_replica_acks: new sessions and prompts are refused until the master has that many replicas in sync)" {
			t.Fatalf("Probe %s = %v", what, err)
		}
	}
	short("of a master without replicas")
	if err := newConn(t, Options{Addr: master.Addr()}).Probe(ctx); err != nil {
		t.Fatalf("Probe without min_replica_acks = %v", err)
	}

	replica := redistest.Start(t)
	rc := newConn(t, Options{Addr: replica.Addr()})
	if err := rc.Client().ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port())).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(ctx, t, "the replica acknowledges the probe", func(ctx context.Context) (bool, error) {
		err := c.Probe(ctx)
		return err == nil, err
	})
	replica.Kill()
	short("once its replica is gone")
}

// With Sentinel, connections that reach a replica (a demoted master the
// client did not leave) answer writes READONLY; a READONLY reply makes the
// client ask the Sentinels and close its connections to the replicas, even
// those of pipelines whose first command (a read) succeeded, which go-redis
// keeps.
func TestSentinelReadOnlyLeavesReplica(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := testkit.ContextFor(t, 30*time.Second)
	master, replica := s.Data[0].Addr(), s.Data[1].Addr()
	var stale atomic.Bool
	stale.Store(true)
	var toReplica atomic.Int32 // dials sent to the replica
	c := newConn(t, Options{Addrs: s.Addrs(), MasterName: redistest.MasterName,
		redirect: func(addr string) string {
			if stale.Load() && addr == master {
				toReplica.Add(1)
				return replica
			}
			return addr
		}})
	rdb := c.Client()
	readWrite := func() error {
		pipe := rdb.Pipeline()
		pipe.Get(ctx, "a") // a nil reply, first
		pipe.Set(ctx, "b", "1", 0)
		cmds, err := pipe.Exec(ctx)
		if errors.Is(err, redis.Nil) {
			err = cmds[1].Err()
		}
		return err
	}
	if err := readWrite(); !isReadOnly(err) {
		t.Fatalf("a write through a connection to the replica = %v, want READONLY", err)
	}
	// The READONLY reply starts the heal in the background, which may
	// already have closed the connection: count the dials, not what is open.
	if toReplica.Load() == 0 {
		t.Fatal("no connection was dialed to the replica")
	}
	stale.Store(false) // from now on, new connections reach the master
	redistest.Eventually(ctx, t, "writes reach the master", func(context.Context) (bool, error) {
		err := readWrite()
		return err == nil, err
	})
	for i := range 20 {
		if err := readWrite(); err != nil {
			t.Fatalf("write %d after the heal: %v", i, err)
		}
	}
	if n := c.tracker.open(replica); n != 0 {
		t.Errorf("%d connections to the replica still open", n)
	}
	if c.heals.Load() == 0 {
		t.Error("no heal")
	}
}

// writesResume writes until a write succeeds, then checks that the next
// ones do too (no READONLY left behind); it returns how long it took.
func writesResume(ctx context.Context, t *testing.T, c *Conn, what string, since time.Time) time.Duration {
	t.Helper()
	failures := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, c.Timeout())
		err := c.Client().Set(wctx, "k", what, 0).Err()
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: no write before the deadline: %v", what, err)
		}
		failures++
	}
	d := time.Since(since)
	t.Logf("%s: writes again after %v (%d failed meanwhile)", what, d.Round(time.Millisecond), failures)
	for i := range 50 {
		if err := c.Client().Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatalf("%s: write %d after writes resumed: %v", what, i, err)
		}
	}
	return d
}

// With Sentinel, writes resume on the new master after SENTINEL FAILOVER,
// without a restart and without a lasting READONLY.
func TestSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := testkit.ContextFor(t, 60*time.Second)
	c := newConn(t, Options{Addrs: s.Addrs(), MasterName: redistest.MasterName, KeyPrefix: "t:"})
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("Probe = %v", err)
	}
	old, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.Failover(ctx)
	s.WaitMaster(ctx, old)
	writesResume(ctx, t, c, "SENTINEL FAILOVER", start)
	if err := c.Probe(ctx); err != nil {
		t.Errorf("Probe after the failover = %v", err)
	}
}

// With Sentinel, writes resume on the promoted replica after the master is
// killed; the probe fails while they cannot.
func TestSentinelMasterKilled(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := testkit.ContextFor(t, 60*time.Second)
	sentinelMasterKilled(ctx, t, s, newConn(t, Options{Addrs: s.Addrs(), MasterName: redistest.MasterName, KeyPrefix: "t:"}))
}

// sentinelMasterKilled kills the master of s under c and checks that writes
// resume on the promoted replica and that the probe fails meanwhile.
func sentinelMasterKilled(ctx context.Context, t *testing.T, s *redistest.Sentinels, c *Conn) {
	t.Helper()
	if err := c.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.Kill(old)
	if err := c.Probe(ctx); err == nil {
		t.Error("Probe with the master killed = nil")
	}
	d := writesResume(ctx, t, c, "master killed", start)
	if d > 15*time.Second {
		t.Errorf("writes resumed after %v", d)
	}
	if err := c.Probe(ctx); err != nil {
		t.Errorf("Probe after the failover = %v", err)
	}
}
