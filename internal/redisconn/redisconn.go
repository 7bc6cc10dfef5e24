// Package redisconn builds agentd's one Redis client, shared by the
// credential store, the cooldown registry and the session store, for the
// topology the configuration names:
//
//   - single (store.redis.addr): a redis.Client on one server;
//   - cluster (store.redis.addrs, cluster: true): a redis.ClusterClient
//     whose slot map is reloaded every ClusterReloadInterval and, at most
//     every minHealGap, as soon as a call fails on the connection or with
//     READONLY, CLUSTERDOWN, LOADING, MASTERDOWN or TRYAGAIN (go-redis
//     alone reloads on MOVED/ASK only, or every 60 s: a killed master's
//     slots kept dialing the dead node until then);
//   - sentinel (store.redis.addrs, master_name): go-redis' failover client,
//     which asks the Sentinels for the master on every new connection and
//     drops its connections to the old one on +switch-master. A READONLY
//     reply (a connection still on a demoted master: a missed or late
//     +switch-master) makes it ask the Sentinels again and close every
//     connection to a node they call a replica, so that the next call dials
//     the master.
//
// Every dial, read, write and wait for a pooled connection is bounded by
// Options.Timeout (DefaultTimeout when unset), and the client honours
// context deadlines (ContextTimeoutEnabled), which the stores require.
// Writable is the readiness probe: a real write on every master.
package redisconn

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/config"
)

// Topology names a Redis deployment.
type Topology string

// The topologies.
const (
	Single   Topology = "single"
	Cluster  Topology = "cluster"
	Sentinel Topology = "sentinel"
)

// Defaults and bounds.
const (
	// DefaultTimeout bounds each dial, command write and read and pool
	// wait when Options.Timeout is unset (store.redis.timeout_ms: 0).
	DefaultTimeout = 500 * time.Millisecond
	// ClusterReloadInterval is how old the Cluster slot map may get before
	// a call reloads it (in the background) even without errors.
	ClusterReloadInterval = 2 * time.Second
	// minHealGap spaces the reloads (Cluster) and Sentinel look-ups that
	// failing calls trigger.
	minHealGap = 250 * time.Millisecond
	// maxRetries is go-redis' retries of a command that failed on the
	// connection or with LOADING, READONLY, TRYAGAIN, CLUSTERDOWN (single
	// server, Sentinel); a Cluster follows MOVED/ASK and retries up to
	// maxRedirects times. Every retry stays within the call's context.
	//
	// A Cluster's count is high enough that the call's context (the
	// store's timeout) bounds its retries, not the count: while a slot
	// migrates (a reshard), a script whose keys are split between the two
	// masters, or that would create a key on the new one before the slot
	// is handed over, is refused with TRYAGAIN, and a call that found its
	// keys gone goes ASK → TRYAGAIN → MOVED back, three attempts per
	// backoff. With 3 a call gave up within ≈ 50 ms of such a window.
	maxRetries   = 3
	maxRedirects = 16
	minBackoff   = 8 * time.Millisecond
	maxBackoff   = 128 * time.Millisecond
	// dialAttempts: a node that refuses or times out is tried this many
	// times per new connection (go-redis' default is 5).
	dialAttempts = 2
	dialBackoff  = 50 * time.Millisecond
)

// Options describe the Redis to connect to.
type Options struct {
	// Addr is one server (Single).
	Addr string
	// Addrs are a Cluster's seed nodes (Cluster) or the Sentinels
	// (MasterName set).
	Addrs []string
	// Cluster: Addrs are Cluster nodes.
	Cluster bool
	// MasterName is the master the Sentinels watch.
	MasterName string
	// Password authenticates with the Redis servers; SentinelPassword with
	// the Sentinels. Neither appears in an error or a log line.
	Password         string
	SentinelPassword string
	// Username and SentinelUsername name the ACL users of the passwords
	// ("": the default user).
	Username         string
	SentinelUsername string
	// TLS, when not nil, is every connection's TLS (the Sentinels' too).
	TLS *tls.Config
	DB  int
	// Timeout bounds each dial, command write and read, and pool wait;
	// <= 0 means DefaultTimeout.
	Timeout time.Duration
	// KeyPrefix starts the readiness probe's keys (store.redis.key_prefix).
	KeyPrefix string
	// MinReplicaAcks (store.redis.min_replica_acks), when > 0, is how many
	// replicas must acknowledge the readiness probe's write (WAIT): with
	// fewer, the store refuses new sessions and prompts, and the probe
	// says so.
	MinReplicaAcks int
	// Logger receives what the client heals (reloads, closed connections);
	// nil discards it.
	Logger *slog.Logger

	// redirect, in tests, changes the address a Sentinel-resolved
	// connection dials (a stale view of the master).
	redirect func(addr string) string
}

// FromConfig is the Options of the store.redis section (already
// validated by package config).
func FromConfig(r config.Redis) Options {
	return Options{
		Addr: r.Addr, Addrs: r.Addrs, Cluster: r.Cluster, MasterName: r.MasterName,
		Password: r.Password, SentinelPassword: r.SentinelPassword, DB: r.DB,
		Username: r.Username, SentinelUsername: r.SentinelUsername, TLS: r.TLS.Config,
		Timeout: r.TimeoutMs.Duration(), KeyPrefix: r.KeyPrefix,
		MinReplicaAcks: r.MinReplicaAcks,
	}
}

// Conn is agentd's Redis client and what keeps it on the right nodes.
type Conn struct {
	client   redis.UniversalClient
	topology Topology
	timeout  time.Duration
	log      *slog.Logger
	o        Options

	cluster  *redis.ClusterClient // Cluster
	tracker  *tracker             // Sentinel: the connections to data nodes
	lastHeal atomic.Int64         // unix ns of the last triggered heal
	healing  atomic.Bool          // a Sentinel look-up runs
	heals    atomic.Int64         // heals started (tests)
	wg       sync.WaitGroup
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc

	probe prober
}

// New builds the client for o's topology. It does not wait for Redis.
func New(o Options) (*Conn, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{timeout: o.Timeout, log: log, o: o}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	t := o.Timeout
	switch {
	case o.Cluster && o.MasterName != "":
		return nil, errors.New("redisconn: a Cluster and a Sentinel master exclude each other")
	case o.Cluster:
		if len(o.Addrs) == 0 {
			return nil, errors.New("redisconn: a Cluster needs its seed nodes")
		}
		if o.DB != 0 {
			return nil, errors.New("redisconn: a Cluster has database 0 only")
		}
		c.topology = Cluster
		c.cluster = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                      o.Addrs,
			Username:                   o.Username,
			Password:                   o.Password,
			TLSConfig:                  o.TLS,
			ReadOnly:                   false,
			MaxRedirects:               maxRedirects,
			MinRetryBackoff:            minBackoff,
			MaxRetryBackoff:            maxBackoff,
			DialTimeout:                t,
			ReadTimeout:                t,
			WriteTimeout:               t,
			PoolTimeout:                t,
			DialerRetries:              dialAttempts,
			DialerRetryTimeout:         dialBackoff,
			ContextTimeoutEnabled:      true,
			ClusterStateReloadInterval: ClusterReloadInterval,
		})
		c.client = c.cluster
	case o.MasterName != "":
		if len(o.Addrs) == 0 {
			return nil, errors.New("redisconn: Sentinel needs the Sentinels' addresses")
		}
		c.topology = Sentinel
		c.tracker = &tracker{conns: map[*trackedConn]struct{}{}, redirect: o.redirect, timeout: t, tls: o.TLS}
		c.client = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            o.MasterName,
			SentinelAddrs:         o.Addrs,
			SentinelUsername:      o.SentinelUsername,
			SentinelPassword:      o.SentinelPassword,
			Username:              o.Username,
			Password:              o.Password,
			TLSConfig:             o.TLS, // the tracker's dial does the handshake
			DB:                    o.DB,
			Dialer:                c.tracker.dial,
			MaxRetries:            maxRetries,
			MinRetryBackoff:       minBackoff,
			MaxRetryBackoff:       maxBackoff,
			DialTimeout:           t,
			ReadTimeout:           t,
			WriteTimeout:          t,
			PoolTimeout:           t,
			DialerRetries:         dialAttempts,
			DialerRetryTimeout:    dialBackoff,
			ContextTimeoutEnabled: true,
		})
	default:
		if o.Addr == "" {
			return nil, errors.New("redisconn: no address")
		}
		c.topology = Single
		c.client = redis.NewClient(&redis.Options{
			Addr:                  o.Addr,
			Username:              o.Username,
			Password:              o.Password,
			TLSConfig:             o.TLS,
			DB:                    o.DB,
			MaxRetries:            maxRetries,
			MinRetryBackoff:       minBackoff,
			MaxRetryBackoff:       maxBackoff,
			DialTimeout:           t,
			ReadTimeout:           t,
			WriteTimeout:          t,
			PoolTimeout:           t,
			DialerRetries:         dialAttempts,
			DialerRetryTimeout:    dialBackoff,
			ContextTimeoutEnabled: true,
		})
	}
	if c.topology != Single {
		c.client.AddHook(healHook{c})
	}
	c.probe.init(c)
	return c, nil
}

// Client is the go-redis client: a *redis.Client (Single, Sentinel) or a
// *redis.ClusterClient.
func (c *Conn) Client() redis.UniversalClient { return c.client }

// Topology is the deployment the client was built for.
func (c *Conn) Topology() Topology { return c.topology }

// Timeout is the bound of each Redis call (Options.Timeout, or
// DefaultTimeout), which the stores use for their operations too.
func (c *Conn) Timeout() time.Duration { return c.timeout }

// Close stops the healing and closes the client.
func (c *Conn) Close() error {
	c.cancel()
	c.wg.Wait()
	return c.client.Close()
}

// newID is a random id for this process' probe keys.
func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tracker dials the Sentinel client's connections and remembers those that
// are open, by the address they reach, so that the ones to a demoted master
// can be closed.
type tracker struct {
	mu       sync.Mutex
	conns    map[*trackedConn]struct{}
	redirect func(string) string
	timeout  time.Duration
	tls      *tls.Config // nil: plain TCP
}

// trackedConn is a TCP connection that leaves its tracker when closed. It
// keeps every method of *net.TCPConn (go-redis' health check on a pooled
// connection uses SyscallConn: a connection closed under it is discarded
// before use).
type trackedConn struct {
	*net.TCPConn
	t    *tracker
	addr string
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.TCPConn.Close()
}

func (t *tracker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if t.redirect != nil {
		addr = t.redirect(addr)
	}
	d := net.Dialer{Timeout: t.timeout, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3}}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tcp, ok := nc.(*net.TCPConn)
	if !ok {
		return nc, nil
	}
	c := &trackedConn{TCPConn: tcp, t: t, addr: addr}
	t.mu.Lock()
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	if t.tls == nil {
		return c, nil
	}
	// A custom dialer is go-redis' whole dial: the handshake is its too.
	cfg := t.tls
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(c, cfg)
	hctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// closeTo closes the open connections to the given addresses and returns
// how many.
func (t *tracker) closeTo(addrs map[string]bool) int {
	t.mu.Lock()
	var doomed []*trackedConn
	for c := range t.conns {
		if addrs[c.addr] {
			doomed = append(doomed, c)
		}
	}
	t.mu.Unlock()
	for _, c := range doomed {
		_ = c.Close()
	}
	return len(doomed)
}

// open counts the open connections to addr (tests).
func (t *tracker) open(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for c := range t.conns {
		if c.addr == addr {
			n++
		}
	}
	return n
}

// errorf is fmt.Errorf with the package's prefix.
func errorf(format string, args ...any) error {
	return fmt.Errorf("redisconn: "+format, args...)
}
