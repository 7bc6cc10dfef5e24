package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/testkit"
)

//lint:file-ignore SA1019 the helpers read the slot map as redisconn's probe does (CLUSTER SLOTS, which every supported Redis answers; CLUSTER SHARDS needs Redis 7)

// NodeTimeout is the Cluster's cluster-node-timeout and the Sentinels'
// down-after-milliseconds: how long a node may be silent before it is
// failed over.
const NodeTimeout = 2 * time.Second

// pollEvery is how often the waits read Redis' state.
const pollEvery = 50 * time.Millisecond

// Eventually polls cond every pollEvery until it reports true, and fails
// the test with cond's last error (or what) when ctx ends first.
func Eventually(ctx context.Context, t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	testkit.EventuallyCtx(ctx, t, pollEvery, what, cond)
}

// awaitDialers registers a cleanup, to run after the test's others (its
// clients closed, its servers killed), that waits until go-redis' dial
// probes are gone: a client whose dials failed (a killed node) keeps one
// per pool, which sees its pool closed within a second.
func awaitDialers(t *testing.T) {
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		buf := make([]byte, 1<<20)
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for time.Now().Before(deadline) {
			n := runtime.Stack(buf, true)
			if !bytes.Contains(buf[:n], []byte("(*ConnPool).tryDial")) {
				return
			}
			<-tick.C
		}
	})
}

// with runs fn with a client of its own on addr, closed after it.
func with(addr string, fn func(c *redis.Client) error) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, DialerRetries: 1, PoolSize: 1,
		ContextTimeoutEnabled: true})
	defer c.Close()
	return fn(c)
}

// infoField reads field from an INFO section of the server at addr.
func infoField(ctx context.Context, addr, section, field string) (string, error) {
	var v string
	err := with(addr, func(c *redis.Client) error {
		info, err := c.Info(ctx, section).Result()
		if err != nil {
			return err
		}
		v = fieldOf(info, field)
		return nil
	})
	return v, err
}

// fieldOf is field's value in an INFO (or CLUSTER INFO) reply.
func fieldOf(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// ---------------------------------------------------------------------------
// Cluster.

// Cluster is a Redis Cluster of 3 masters and 3 replicas on loopback, each
// node with a directory of its own (its nodes.conf), cluster-node-timeout
// NodeTimeout, nothing saved. It is killed when the test ends.
type Cluster struct {
	t     *testing.T
	Nodes []*Server
}

// StartCluster starts 6 nodes, creates the Cluster with redis-cli (one
// replica per master) and waits until every node says cluster_state:ok and
// every replica is in sync with its master. It skips the test without
// redis-server or redis-cli.
func StartCluster(t *testing.T) *Cluster {
	t.Helper()
	return startCluster(t, nil)
}

// StartClusterTLS is StartCluster with every node also on a TLS port
// (TLSAddrs), the nodes speaking to each other and replicating over TLS
// (tls-cluster, tls-replication). A client on a TLS port is told the other
// nodes' TLS ports (CLUSTER SLOTS, MOVED); the test's own probes keep the
// plain ports (Addrs).
func StartClusterTLS(t *testing.T, f TLSFiles) *Cluster {
	t.Helper()
	return startCluster(t, &f)
}

func startCluster(t *testing.T, tlsFiles *TLSFiles) *Cluster {
	t.Helper()
	RequireCLI(t)
	awaitDialers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := t.TempDir()
	c := &Cluster{t: t}
	for range 6 {
		s := New(t)
		s.dir = filepath.Join(root, "n"+strconv.Itoa(s.port))
		mkdir(t, s.dir)
		s.args = []string{"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "n"+strconv.Itoa(s.port)+".conf"),
			"--cluster-node-timeout", strconv.Itoa(int(NodeTimeout / time.Millisecond)),
			"--cluster-port", strconv.Itoa(freePort(t))}
		if tlsFiles != nil {
			s.useTLS(*tlsFiles)
			s.args = append(s.args, "--tls-cluster", "yes")
		}
		s.Start()
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	if tlsFiles != nil {
		// The nodes meet on the addresses redis-cli connects to: their
		// TLS ones, as their bus speaks TLS.
		args = append([]string{"--tls", "--cacert", tlsFiles.CA}, args...)
		args = append(args, c.TLSAddrs()...)
	} else {
		args = append(args, c.Addrs()...)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	Eventually(ctx, t, "every node says cluster_state:ok and knows the 6 nodes", func(ctx context.Context) (bool, error) {
		for _, n := range c.Nodes {
			var info string
			if err := with(n.Addr(), func(rc *redis.Client) (err error) {
				info, err = rc.ClusterInfo(ctx).Result()
				return err
			}); err != nil {
				return false, err
			}
			if fieldOf(info, "cluster_state") != "ok" || fieldOf(info, "cluster_known_nodes") != "6" {
				return false, fmt.Errorf("node %s: cluster_state %s, known nodes %s", n.Addr(),
					fieldOf(info, "cluster_state"), fieldOf(info, "cluster_known_nodes"))
			}
		}
		return true, nil
	})
	Eventually(ctx, t, "every replica is in sync with its master", func(ctx context.Context) (bool, error) {
		replicas := 0
		for _, n := range c.Nodes {
			role, err := infoField(ctx, n.Addr(), "replication", "role")
			if err != nil {
				return false, err
			}
			if role != "slave" {
				continue
			}
			replicas++
			link, err := infoField(ctx, n.Addr(), "replication", "master_link_status")
			if err != nil || link != "up" {
				return false, err
			}
		}
		return replicas == 3, nil
	})
	// And from the masters' side: a replica whose link is up may not have
	// been sent the writes buffered for it while it loaded.
	for _, n := range c.Nodes {
		if role, err := infoField(ctx, n.Addr(), "replication", "role"); err == nil && role == "master" {
			waitReplicated(ctx, t, n.Addr())
		}
	}
	return c
}

// Addrs are the nodes' addresses (the seed list).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// TLSAddrs are the nodes' TLS addresses (StartClusterTLS).
func (c *Cluster) TLSAddrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.TLSAddr()
	}
	return out
}

// Node is the node at addr (plain or TLS), nil when none.
func (c *Cluster) Node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr() == addr || n.TLSAddr() == addr && addr != "" {
			return n
		}
	}
	return nil
}

// live is an address of a running node.
func (c *Cluster) live() []string {
	var out []string
	for _, n := range c.Nodes {
		if n.Running() {
			out = append(out, n.Addr())
		}
	}
	return out
}

// Slot is key's hash slot (CLUSTER KEYSLOT on a running node).
func (c *Cluster) Slot(ctx context.Context, key string) (int, error) {
	var lastErr error = errors.New("no node runs")
	for _, addr := range c.live() {
		var slot int64
		err := with(addr, func(rc *redis.Client) (err error) {
			slot, err = rc.ClusterKeySlot(ctx, key).Result()
			return err
		})
		if err == nil {
			return int(slot), nil
		}
		lastErr = err
	}
	return 0, lastErr
}

// MasterOf is the node a running node names as the master of key's slot,
// and that node's own view agrees (it says role:master).
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	slot, err := c.Slot(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.masterOfSlot(ctx, slot)
}

// masterOfSlot is the node a running node names as slot's master.
func (c *Cluster) masterOfSlot(ctx context.Context, slot int) (*Server, error) {
	var lastErr error = errors.New("no node runs")
	for _, addr := range c.live() {
		var slots []redis.ClusterSlot
		err := with(addr, func(rc *redis.Client) (err error) {
			slots, err = rc.ClusterSlots(ctx).Result()
			return err
		})
		if err != nil {
			lastErr = err
			continue
		}
		for _, s := range slots {
			if int(s.Start) <= slot && slot <= int(s.End) && len(s.Nodes) > 0 {
				n := c.Node(s.Nodes[0].Addr)
				if n == nil {
					return nil, fmt.Errorf("slot %d: master %s is not a node of this cluster", slot, s.Nodes[0].Addr)
				}
				return n, nil
			}
		}
		return nil, fmt.Errorf("slot %d: no master", slot)
	}
	return nil, lastErr
}

// Kill kills n with SIGKILL (a crash).
func (c *Cluster) Kill(n *Server) { n.Kill() }

// WaitReplicated waits until the replicas of master have acknowledged
// every write it took before the call. Replication is asynchronous: a
// master killed right after a write may take it along (a session created
// a moment before is then gone on the promoted replica, as it would be in
// production without min_replica_acks). A test about what survives a
// failover calls it between its setup and the kill.
func (c *Cluster) WaitReplicated(ctx context.Context, master *Server) {
	c.t.Helper()
	waitReplicated(ctx, c.t, master.Addr())
}

// replication is a master's INFO replication: its offset and, for each
// replica it lists, whether it is online and at which offset.
type replication struct {
	offset   int64
	replicas []replicaState
}

type replicaState struct {
	line   string // as INFO gives it
	online bool
	offset int64
}

// replicationOf reads the INFO replication of the master at addr.
func replicationOf(ctx context.Context, addr string) (replication, error) {
	var info string
	if err := with(addr, func(c *redis.Client) (err error) {
		info, err = c.Info(ctx, "replication").Result()
		return err
	}); err != nil {
		return replication{}, err
	}
	var r replication
	var err error
	if r.offset, err = strconv.ParseInt(fieldOf(info, "master_repl_offset"), 10, 64); err != nil {
		return r, fmt.Errorf("%s: master_repl_offset: %w", addr, err)
	}
	for i := 0; ; i++ {
		v := fieldOf(info, "slave"+strconv.Itoa(i))
		if v == "" {
			return r, nil
		}
		rs := replicaState{line: v, online: strings.Contains(v, "state=online"), offset: -1}
		for _, kv := range strings.Split(v, ",") {
			if k, x, ok := strings.Cut(kv, "="); ok && k == "offset" {
				rs.offset, _ = strconv.ParseInt(x, 10, 64)
			}
		}
		r.replicas = append(r.replicas, rs)
	}
}

// waitReplicated waits until every replica the master at addr lists is
// online at an offset at least its master_repl_offset when called.
func waitReplicated(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	want := int64(-1)
	Eventually(ctx, t, addr+"'s replicas have acknowledged its writes", func(ctx context.Context) (bool, error) {
		r, err := replicationOf(ctx, addr)
		if err != nil {
			return false, err
		}
		if want < 0 {
			want = r.offset
		}
		if len(r.replicas) == 0 {
			return false, fmt.Errorf("%s lists no replica", addr)
		}
		for _, rs := range r.replicas {
			if !rs.online || rs.offset < want {
				return false, fmt.Errorf("%s: replica %s, at %d of %d", addr, rs.line, rs.offset, want)
			}
		}
		return true, nil
	})
}

// WaitFailover waits until a running node other than old is the master of
// key's slot in every running node's view, says role:master itself, and
// every running node says cluster_state:ok; it returns the new master.
func (c *Cluster) WaitFailover(ctx context.Context, key string, old *Server) *Server {
	c.t.Helper()
	slot, err := c.Slot(ctx, key)
	if err != nil {
		c.t.Fatal(err)
	}
	var master *Server
	Eventually(ctx, c.t, fmt.Sprintf("a replica of %s has taken slot %d over", old.Addr(), slot), func(ctx context.Context) (bool, error) {
		master = nil
		for _, addr := range c.live() {
			var slots []redis.ClusterSlot
			var info string
			err := with(addr, func(rc *redis.Client) (err error) {
				if info, err = rc.ClusterInfo(ctx).Result(); err != nil {
					return err
				}
				slots, err = rc.ClusterSlots(ctx).Result()
				return err
			})
			if err != nil {
				return false, err
			}
			if st := fieldOf(info, "cluster_state"); st != "ok" {
				return false, fmt.Errorf("%s: cluster_state %s", addr, st)
			}
			var owner string
			for _, s := range slots {
				if int(s.Start) <= slot && slot <= int(s.End) && len(s.Nodes) > 0 {
					owner = s.Nodes[0].Addr
				}
			}
			if owner == "" || owner == old.Addr() {
				return false, fmt.Errorf("%s: slot %d still on %q", addr, slot, owner)
			}
			if master != nil && master.Addr() != owner {
				return false, fmt.Errorf("nodes disagree on slot %d's master", slot)
			}
			master = c.Node(owner)
		}
		if master == nil {
			return false, nil
		}
		role, err := infoField(ctx, master.Addr(), "replication", "role")
		return role == "master", err
	})
	return master
}

// ---------------------------------------------------------------------------
// Sentinel.

// MasterName is the name the Sentinels of StartSentinel watch.
const MasterName = "mymaster"

// Sentinels is a master, one replica and 3 Sentinels (quorum 2,
// down-after-milliseconds NodeTimeout, a short failover-timeout) on
// loopback. They are killed when the test ends.
type Sentinels struct {
	t         *testing.T
	Data      []*Server // the master first, then the replica (initial roles)
	Sentinels []*Server
}

// StartSentinel starts the data nodes, waits for the replica to sync, then
// starts the Sentinels and waits until each knows the replica and the 2
// other Sentinels. It skips the test without redis-server.
func StartSentinel(t *testing.T) *Sentinels {
	t.Helper()
	return startSentinel(t, nil)
}

// StartSentinelTLS is StartSentinel with every node, the Sentinels too,
// also on a TLS port (TLSAddrs, Server.TLSAddr): the replica replicates
// and the Sentinels watch the data nodes over TLS, so a client asking a
// Sentinel on its TLS port is told the master's TLS address. The helpers
// (Master, WaitMaster, Node, Kill) speak of the plain addresses.
func StartSentinelTLS(t *testing.T, f TLSFiles) *Sentinels {
	t.Helper()
	return startSentinel(t, &f)
}

func startSentinel(t *testing.T, tlsFiles *TLSFiles) *Sentinels {
	t.Helper()
	Require(t)
	awaitDialers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := t.TempDir()
	s := &Sentinels{t: t}
	master := New(t)
	master.dir = filepath.Join(root, "m"+strconv.Itoa(master.port))
	mkdir(t, master.dir)
	masterPort := master.port
	if tlsFiles != nil {
		master.useTLS(*tlsFiles)
		masterPort = master.tlsPort
	}
	master.Start()
	replica := New(t)
	replica.dir = filepath.Join(root, "r"+strconv.Itoa(replica.port))
	mkdir(t, replica.dir)
	replica.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(masterPort)}
	if tlsFiles != nil {
		replica.useTLS(*tlsFiles)
	}
	replica.Start()
	s.Data = []*Server{master, replica}
	Eventually(ctx, t, "the replica is in sync", func(ctx context.Context) (bool, error) {
		link, err := infoField(ctx, replica.Addr(), "replication", "master_link_status")
		return link == "up", err
	})
	waitReplicated(ctx, t, master.Addr())
	for range 3 {
		n := New(t)
		n.dir = filepath.Join(root, "s"+strconv.Itoa(n.port))
		mkdir(t, n.dir)
		n.conf = filepath.Join(n.dir, "sentinel.conf")
		conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s 4000\n"+
			"sentinel parallel-syncs %[1]s 1\n", MasterName, masterPort, int(NodeTimeout/time.Millisecond))
		if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		n.args = []string{"--sentinel"}
		if tlsFiles != nil {
			n.useTLS(*tlsFiles)
		}
		n.Start()
		s.Sentinels = append(s.Sentinels, n)
	}
	Eventually(ctx, t, "every Sentinel knows the replica and the other Sentinels", func(ctx context.Context) (bool, error) {
		for _, n := range s.Sentinels {
			m, err := s.sentinelMaster(ctx, n.Addr())
			if err != nil {
				return false, err
			}
			if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" || m["flags"] != "master" {
				return false, fmt.Errorf("sentinel %s: %v", n.Addr(), m)
			}
		}
		return true, nil
	})
	return s
}

// Addrs are the Sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.Addr()
	}
	return out
}

// TLSAddrs are the Sentinels' TLS addresses (StartSentinelTLS).
func (s *Sentinels) TLSAddrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.TLSAddr()
	}
	return out
}

// Node is the data node at addr (plain or TLS), nil when none.
func (s *Sentinels) Node(addr string) *Server {
	for _, n := range s.Data {
		if n.Addr() == addr || n.TLSAddr() == addr && addr != "" {
			return n
		}
	}
	return nil
}

func (s *Sentinels) sentinelMaster(ctx context.Context, addr string) (map[string]string, error) {
	var m map[string]string
	err := withSentinel(addr, func(sc *redis.SentinelClient) (err error) {
		m, err = sc.Master(ctx, MasterName).Result()
		return err
	})
	return m, err
}

func withSentinel(addr string, fn func(sc *redis.SentinelClient) error) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, DialerRetries: 1, PoolSize: 1,
		ContextTimeoutEnabled: true})
	defer sc.Close()
	return fn(sc)
}

// Master is the master's address as every Sentinel names it (an error
// while they disagree); its plain address when the Sentinels name its TLS
// one.
func (s *Sentinels) Master(ctx context.Context) (string, error) {
	var addr string
	for _, n := range s.Sentinels {
		var got []string
		if err := withSentinel(n.Addr(), func(sc *redis.SentinelClient) (err error) {
			got, err = sc.GetMasterAddrByName(ctx, MasterName).Result()
			return err
		}); err != nil {
			return "", err
		}
		if len(got) != 2 {
			return "", fmt.Errorf("sentinel %s: master %v", n.Addr(), got)
		}
		a := net.JoinHostPort(got[0], got[1])
		if n := s.Node(a); n != nil {
			a = n.Addr()
		}
		if addr != "" && a != addr {
			return "", fmt.Errorf("the Sentinels disagree: %s, %s", addr, a)
		}
		addr = a
	}
	return addr, nil
}

// Failover asks a Sentinel for a failover (SENTINEL FAILOVER), retrying
// while it refuses (a failover in progress, no good replica yet).
func (s *Sentinels) Failover(ctx context.Context) {
	s.t.Helper()
	Eventually(ctx, s.t, "a Sentinel accepts SENTINEL FAILOVER", func(ctx context.Context) (bool, error) {
		err := withSentinel(s.Sentinels[0].Addr(), func(sc *redis.SentinelClient) error {
			return sc.Failover(ctx, MasterName).Err()
		})
		return err == nil, err
	})
}

// Kill kills the data node at addr with SIGKILL (a crash).
func (s *Sentinels) Kill(addr string) {
	s.t.Helper()
	n := s.Node(addr)
	if n == nil {
		s.t.Fatalf("no data node at %s", addr)
	}
	n.Kill()
}

// WaitMaster waits until every Sentinel names a master other than old and
// that node says role:master; it returns its address.
func (s *Sentinels) WaitMaster(ctx context.Context, old string) string {
	s.t.Helper()
	var addr string
	Eventually(ctx, s.t, "the Sentinels name a master other than "+old, func(ctx context.Context) (bool, error) {
		a, err := s.Master(ctx)
		if err != nil || a == old {
			return false, err
		}
		role, err := infoField(ctx, a, "replication", "role")
		if err != nil || role != "master" {
			return false, err
		}
		addr = a
		return true, nil
	})
	return addr
}

// WaitReplicas waits until the master at addr has n replicas in sync
// (state=online).
func (s *Sentinels) WaitReplicas(ctx context.Context, addr string, n int) {
	s.t.Helper()
	Eventually(ctx, s.t, fmt.Sprintf("%s has %d replicas in sync", addr, n), func(ctx context.Context) (bool, error) {
		r, err := replicationOf(ctx, addr)
		if err != nil {
			return false, err
		}
		online := 0
		for _, rs := range r.replicas {
			if rs.online {
				online++
			}
		}
		return online >= n, nil
	})
}

// nodeID is the Cluster node id of the node at addr (CLUSTER MYID).
func nodeID(ctx context.Context, addr string) (string, error) {
	var id string
	err := with(addr, func(rc *redis.Client) (err error) {
		id, err = rc.Do(ctx, "cluster", "myid").Text()
		return err
	})
	return id, err
}

// MoveSlot moves slot from its master to the master to, while clients go
// on using it, as `redis-cli --cluster reshard` does: to IMPORTING, the
// source MIGRATING, the slot's keys MIGRATEd batch keys at a time, then
// every master told that to owns the slot. between, when not nil, runs
// after the slot is MIGRATING and after each batch: the test holds the
// migration's states open there (waiting for the clients' traffic to go on
// in them), or moves keys of its choice first (Migrate). It returns how
// many keys MoveSlot moved.
func (c *Cluster) MoveSlot(ctx context.Context, slot int, to *Server, batch int, between func()) int {
	c.t.Helper()
	from, err := c.masterOfSlot(ctx, slot)
	if err != nil {
		c.t.Fatal(err)
	}
	if from == to {
		c.t.Fatalf("slot %d is on %s already", slot, to.Addr())
	}
	fromID, err := nodeID(ctx, from.Addr())
	if err != nil {
		c.t.Fatal(err)
	}
	toID, err := nodeID(ctx, to.Addr())
	if err != nil {
		c.t.Fatal(err)
	}
	do := func(addr string, args ...any) {
		c.t.Helper()
		if err := with(addr, func(rc *redis.Client) error { return rc.Do(ctx, args...).Err() }); err != nil {
			c.t.Fatalf("%s: %v: %v", addr, args, err)
		}
	}
	do(to.Addr(), "cluster", "setslot", slot, "importing", fromID)
	do(from.Addr(), "cluster", "setslot", slot, "migrating", toID)
	if between != nil {
		between()
	}
	moved := 0
	for {
		var keys []string
		if err := with(from.Addr(), func(rc *redis.Client) (err error) {
			keys, err = rc.ClusterGetKeysInSlot(ctx, slot, batch).Result()
			return err
		}); err != nil {
			c.t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		c.Migrate(ctx, from, to, keys...)
		moved += len(keys)
		if between != nil {
			between()
		}
	}
	// The new owner first, then the old one (its clients are sent on with
	// MOVED from then on), then the other masters.
	do(to.Addr(), "cluster", "setslot", slot, "node", toID)
	do(from.Addr(), "cluster", "setslot", slot, "node", toID)
	for _, n := range c.Nodes {
		if n == to || n == from || !n.Running() {
			continue
		}
		if role, err := infoField(ctx, n.Addr(), "replication", "role"); err == nil && role == "master" {
			do(n.Addr(), "cluster", "setslot", slot, "node", toID)
		}
	}
	return moved
}

// Migrate moves keys (of a slot MIGRATING from from to to) in one MIGRATE.
func (c *Cluster) Migrate(ctx context.Context, from, to *Server, keys ...string) {
	c.t.Helper()
	host, port, _ := net.SplitHostPort(to.Addr())
	args := []any{"migrate", host, port, "", 0, 5000, "keys"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := with(from.Addr(), func(rc *redis.Client) error { return rc.Do(ctx, args...).Err() }); err != nil {
		c.t.Fatalf("%s: migrate %v: %v", from.Addr(), keys, err)
	}
}

// Masters are the running nodes that say role:master.
func (c *Cluster) Masters(ctx context.Context) []*Server {
	c.t.Helper()
	var out []*Server
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		role, err := infoField(ctx, n.Addr(), "replication", "role")
		if err != nil {
			c.t.Fatal(err)
		}
		if role == "master" {
			out = append(out, n)
		}
	}
	return out
}

// Refused is how many commands the node at addr has refused with the error
// code code (MOVED, ASK, TRYAGAIN…): INFO errorstats.
func Refused(ctx context.Context, addr, code string) (int, error) {
	v, err := infoField(ctx, addr, "errorstats", "errorstat_"+code)
	if err != nil || v == "" {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(v, "count="))
	if err != nil {
		return 0, fmt.Errorf("%s: errorstat_%s %q: %w", addr, code, v, err)
	}
	return n, nil
}
