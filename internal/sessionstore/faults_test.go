package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/session"
)

// Fault tests: agentd's three Redis stores on a real Cluster and a real
// Sentinel setup, a master killed (SIGKILL) or failed over.

func newConn(t *testing.T, o redisconn.Options) *redisconn.Conn {
	t.Helper()
	o.KeyPrefix = "t:"
	c, err := redisconn.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newCreds(t *testing.T, c *redisconn.Conn) *credstore.Redis {
	t.Helper()
	st, err := credstore.NewRedis(c.Client(), credstore.RedisOptions{KeyPrefix: "t:", Timeout: c.Timeout(),
		SyncInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// recovery calls op until it succeeds, each call bounded by the store's
// timeout, and returns how long that took from since and how many calls
// failed.
func recovery(ctx context.Context, t *testing.T, what string, since time.Time, op func(ctx context.Context) error) (time.Duration, int) {
	t.Helper()
	failed := 0
	var last error
	for {
		octx, cancel := context.WithTimeout(ctx, time.Second)
		err := op(octx)
		cancel()
		if err == nil {
			return time.Since(since), failed
		}
		last = err
		failed++
		if ctx.Err() != nil {
			t.Fatalf("%s: still failing at the deadline: %v", what, last)
		}
	}
}

func newMasterOf(ctx context.Context, t *testing.T, cl *redistest.Cluster, r *Redis, id string) *redistest.Server {
	t.Helper()
	m, err := cl.MasterOf(ctx, r.key(id, "meta"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A session's slot moves to another master (a reshard) while its prompt
// runs. A history append while the slot's keys are split between the two
// masters (refused with TRYAGAIN until the move is done) waits for the
// move within the store's timeout, far more than go-redis' 3 retries. With
// min_replica_acks, whose writes run on the slot's master (a node client,
// which follows no redirection), the prompt's end follows the slot too,
// whether it comes while the keys are split or right after the slot moved,
// while the client's slot map still names the master it left (MOVED); and
// the next prompt starts and ends on the slot's master.
func TestWritesThroughSlotMove(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := newConn(t, redisconn.Options{Addrs: cl.Addrs(), Cluster: true})
	acked := newStore(t, conn.Client(), Options{Timeout: 5 * time.Second, MinReplicaAcks: 1, AckTimeout: 2 * time.Second})
	const id = "ses_moving"
	if res, err := acked.Create(ctx, record(id, "acme"), 0); err != nil || !res.Created {
		t.Fatalf("Create = %+v, %v", res, err)
	}
	start := func(promptID string) {
		t.Helper()
		first := &session.Entry{Time: created, PromptID: promptID, Message: provider.Message{Role: provider.RoleUser,
			Content: []provider.Block{{Type: provider.BlockText, Text: "hello"}}}}
		res, err := acked.Start(ctx, id, time.Minute, session.Run{PromptID: promptID, Replica: acked.ReplicaID()}, first,
			session.PromptSlot{}, 0)
		if err != nil || !res.Started {
			t.Fatalf("Start %s = %+v, %v", promptID, res, err)
		}
		acked.AppendEvent(id, event(1))
		must(t, acked.Flush(ctx, id))
	}
	ended := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("EndRun %s: %v", what, err)
		}
		if h, err := acked.Holder(ctx, id); h != "" || err != nil {
			t.Fatalf("holder %q (%v) after EndRun %s", h, err, what)
		}
	}
	key := acked.key(id, "meta")
	slot, err := cl.Slot(ctx, key)
	must(t, err)
	from, err := cl.MasterOf(ctx, key)
	must(t, err)
	var to *redistest.Server
	for _, m := range cl.Masters(ctx) {
		if m != from {
			to = m
			break
		}
	}

	// moveSplit moves the slot to the other master, the key first alone:
	// op runs while the slot's keys are split, and the move goes on once
	// the source has refused op's script refusals times (or op returned).
	// It returns op's error.
	moveSplit := func(first string, refusals int, op func() error) error {
		t.Helper()
		done := make(chan error, 1)
		split := true
		cl.MoveSlot(ctx, slot, to, 10, func() {
			if !split {
				return
			}
			split = false
			cl.Migrate(ctx, from, to, acked.key(id, first))
			before, err := redistest.Refused(ctx, from.Addr(), "TRYAGAIN")
			must(t, err)
			go func() { done <- op() }()
			redistest.Eventually(ctx, t, fmt.Sprintf("the script refused %d times while the keys are split", refusals),
				func(ctx context.Context) (bool, error) {
					if len(done) > 0 {
						return true, nil // it gave up (or got through): told below
					}
					n, err := redistest.Refused(ctx, from.Addr(), "TRYAGAIN")
					return n >= before+refusals, err
				})
		})
		from, to = to, from
		return <-done
	}

	// An append while the keys are split (the history moved first, the
	// source refusing the script of the lease, the epoch and the history
	// until the rest follow), held so for more refusals than go-redis' 3
	// retries would have made.
	start("p0")
	if err := moveSplit("history", 6, func() error {
		_, err := acked.Append(ctx, id, session.Entry{Time: created, PromptID: "p0"})
		return err
	}); err != nil {
		t.Fatalf("Append while the slot's keys were split: %v", err)
	}
	ended("after the append", acked.EndRun(ctx, id, session.PromptSlot{}))
	if n, err := conn.Client().LLen(ctx, acked.key(id, "history")).Result(); err != nil || n != 2 {
		t.Fatalf("the history holds %d entries (%v) after the move, want the user message and the append", n, err)
	}

	// The end while the keys are split: the lease moved first.
	start("p1")
	ended("while the slot's keys were split", moveSplit("lease", 1, func() error {
		return acked.EndRun(ctx, id, session.PromptSlot{})
	}))

	// A prompt's start while the keys are split (the record moved first),
	// a pipelined script go-redis does not send again itself: it runs
	// once the move is done, its user message in the history once.
	before, err := conn.Client().LLen(ctx, acked.key(id, "history")).Result()
	must(t, err)
	if err := moveSplit("meta", 3, func() error {
		first := &session.Entry{Time: created, PromptID: "p1b", Message: provider.Message{Role: provider.RoleUser,
			Content: []provider.Block{{Type: provider.BlockText, Text: "split"}}}}
		res, err := acked.Start(ctx, id, time.Minute, session.Run{PromptID: "p1b", Replica: acked.ReplicaID()}, first,
			session.PromptSlot{}, 0)
		if err == nil && !res.Started {
			err = fmt.Errorf("not started: %+v", res)
		}
		return err
	}); err != nil {
		t.Fatalf("Start while the slot's keys were split: %v", err)
	}
	if n, err := conn.Client().LLen(ctx, acked.key(id, "history")).Result(); err != nil || n != before+1 {
		t.Fatalf("the history holds %d entries (%v) after the start, want %d", n, err, before+1)
	}
	ended("after the start", acked.EndRun(ctx, id, session.PromptSlot{}))

	// The end right after the slot moved again: the client's map still
	// names the master the slot left (unless its periodic reload came in
	// between: the move is made again, up to 5 times, until the end met
	// the stale map).
	for attempt := 1; ; attempt++ {
		start(fmt.Sprint("p2-", attempt))
		before, err := redistest.Refused(ctx, from.Addr(), "MOVED")
		must(t, err)
		cl.MoveSlot(ctx, slot, to, 100, nil)
		ended("after the slot moved again", acked.EndRun(ctx, id, session.PromptSlot{}))
		n, err := redistest.Refused(ctx, from.Addr(), "MOVED")
		must(t, err)
		from, to = to, from
		if n > before {
			break
		}
		if attempt == 5 {
			t.Fatalf("the end after a move never met a stale map (MOVED) in %d attempts", attempt)
		}
	}
	start("p3")
	ended("on the slot's master", acked.EndRun(ctx, id, session.PromptSlot{}))
}

// A Cluster master holding a session's slot is killed: once its replica is
// promoted, the session's writes, new sessions of that slot, credentials
// and cooldowns work again, within a bounded time; the session created
// with min_replica_acks before is still there.
func TestClusterMasterOfSessionKilled(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := newConn(t, redisconn.Options{Addrs: cl.Addrs(), Cluster: true})
	// Room for the acknowledgement on a loaded machine: the op's bound
	// covers the WAIT's.
	acked := newStore(t, conn.Client(), Options{Timeout: 3 * time.Second, MinReplicaAcks: 1, AckTimeout: 2 * time.Second})
	plain := newStore(t, conn.Client(), Options{Timeout: conn.Timeout()})
	creds := newCreds(t, conn)
	cools := cooldown.NewRedis(conn.Client(), "t:", nil)

	const id = "ses_cluster1"
	if res, err := acked.Create(ctx, record(id, "acme"), 0); err != nil || !res.Created {
		t.Fatalf("Create = %+v, %v", res, err)
	}
	_, err := plain.Append(ctx, id, session.Entry{Time: created})
	must(t, err)
	plain.AppendEvent(id, event(1))
	must(t, plain.Flush(ctx, id))
	old, err := cl.MasterOf(ctx, acked.key(id, "meta"))
	must(t, err)
	// A provider and another session on the same master.
	var prov string
	for i := 0; prov == ""; i++ {
		p := fmt.Sprint("prov", i)
		if m, err := cl.MasterOf(ctx, "t:{prov:"+p+"}:creds"); err == nil && m == old {
			prov = p
		}
	}
	var sameSlot string
	for i := 0; sameSlot == ""; i++ {
		s := fmt.Sprint("ses_same", i)
		if m, err := cl.MasterOf(ctx, acked.key(s, "meta")); err == nil && m == old {
			sameSlot = s
		}
	}
	if _, err := creds.Add(ctx, credstore.Credential{ID: "k0", Provider: prov, Secret: "sk-0"}); err != nil {
		t.Fatal(err)
	}

	killed := time.Now()
	cl.Kill(old)
	promotedc := make(chan time.Duration, 1)
	var newMaster *redistest.Server
	go func() {
		newMaster = cl.WaitFailover(ctx, acked.key(id, "meta"), old)
		promotedc <- time.Since(killed)
	}()
	n := 1
	took, failed := recovery(ctx, t, "append to the session", killed, func(ctx context.Context) error {
		n++
		_, err := plain.Append(ctx, id, session.Entry{Time: created})
		return err
	})
	promoted := <-promotedc
	t.Logf("master %s killed: the session's slot writable again after %v (replica promoted after %v; %d appends failed)",
		old.Addr(), took.Round(time.Millisecond), promoted.Round(time.Millisecond), failed)
	if took > 15*time.Second {
		t.Errorf("writes to the slot resumed after %v, want well under the 40-50 s of a 60 s slot map reload", took)
	}
	if took > promoted+redisconn.ClusterReloadInterval+2*time.Second {
		t.Errorf("writes resumed %v after the promotion", took-promoted)
	}

	// The acknowledged session and what was stored before.
	rec, ok, err := plain.Load(ctx, id)
	if err != nil || !ok {
		t.Fatalf("the session acknowledged before the kill: Load = %v, %v", ok, err)
	}
	if rec.MessageCount < 1 {
		t.Errorf("the session's history after the failover: %d entries", rec.MessageCount)
	}
	plain.AppendEvent(id, event(2))
	must(t, plain.Flush(ctx, id))
	// New sessions of the slot: created; with min_replica_acks, refused
	// (the promoted master has no replica left) and taken back, while the
	// other masters' still acknowledge.
	if res, err := plain.Create(ctx, record(sameSlot, "acme"), 0); err != nil || !res.Created {
		t.Fatalf("Create on the promoted master = %+v, %v", res, err)
	}
	if _, err := acked.Create(ctx, record(sameSlot+"-acked", "acme"), 0); newMasterOf(ctx, t, cl, acked, sameSlot+"-acked") == newMaster {
		if !errors.Is(err, ErrNotReplicated) {
			t.Errorf("Create with min_replica_acks on a master without a replica = %v, want ErrNotReplicated", err)
		}
		if _, ok, _ := plain.Load(ctx, sameSlot+"-acked"); ok {
			t.Error("a session not replicated stayed")
		}
	}
	for i := 0; ; i++ {
		other := fmt.Sprint("ses_other", i)
		if newMasterOf(ctx, t, cl, acked, other) == newMaster {
			continue
		}
		if res, err := acked.Create(ctx, record(other, "acme"), 0); err != nil || !res.Created {
			t.Errorf("Create with min_replica_acks on a master with its replica = %+v, %v", res, err)
		}
		break
	}
	// Credentials and cooldowns.
	took, _ = recovery(ctx, t, "add a credential", killed, func(ctx context.Context) error {
		_, err := creds.Add(ctx, credstore.Credential{ID: fmt.Sprint("k", n), Provider: prov, Secret: "sk"})
		n++
		return err
	})
	t.Logf("credentials writable after %v", took.Round(time.Millisecond))
	if _, ok, err := creds.Pick(ctx, "", prov); err != nil || !ok {
		t.Errorf("Pick = %v, %v", ok, err)
	}
	if _, err := creds.UsageLimited(ctx, "", prov, "k0", time.Minute, true, "test"); err != nil {
		t.Errorf("UsageLimited = %v", err)
	}
	recovery(ctx, t, "a cooldown", killed, func(ctx context.Context) error {
		return cools.Suppress(ctx, "p/m1", time.Now().Add(time.Minute))
	})
	if act, err := cools.Active(ctx); err != nil || act["p/m1"].IsZero() {
		t.Errorf("Active = %v, %v", act, err)
	}
	if err := conn.Probe(ctx); err != nil {
		t.Errorf("Probe after the failover = %v", err)
	}
}

// With Sentinel: a session created with min_replica_acks: 1 before the
// master is killed (SIGKILL) or failed over (SENTINEL FAILOVER) is on the
// new master after it, and the stores write again without a restart and
// without a lasting READONLY.
func TestSentinelFailoverKeepsAcknowledgedSessions(t *testing.T) {
	for _, how := range []string{"SENTINEL FAILOVER", "kill -9"} {
		t.Run(how, func(t *testing.T) {
			s := redistest.StartSentinel(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			conn := newConn(t, redisconn.Options{Addrs: s.Addrs(), MasterName: redistest.MasterName})
			// Room for the acknowledgement on a loaded machine: the op's bound
			// covers the WAIT's.
			acked := newStore(t, conn.Client(), Options{Timeout: 3 * time.Second, MinReplicaAcks: 1, AckTimeout: 2 * time.Second})
			plain := newStore(t, conn.Client(), Options{Timeout: conn.Timeout()})
			creds := newCreds(t, conn)
			const id = "ses_sentinel1"
			if res, err := acked.Create(ctx, record(id, "acme"), 0); err != nil || !res.Created {
				t.Fatalf("Create = %+v, %v", res, err)
			}
			old, err := s.Master(ctx)
			must(t, err)
			start := time.Now()
			if how == "kill -9" {
				s.Kill(old)
			} else {
				s.Failover(ctx)
			}
			newMaster := s.WaitMaster(ctx, old)
			promoted := time.Since(start)
			// Every kind of write: a history entry, a save, a new session,
			// a credential.
			i := 0
			writes := func(ctx context.Context) error {
				i++
				if _, err := plain.Append(ctx, id, session.Entry{Time: created}); err != nil {
					return err
				}
				if err := plain.Save(ctx, id, session.Mutable{Model: fmt.Sprint("p/m", i)}); err != nil {
					return err
				}
				if res, err := plain.Create(ctx, record(fmt.Sprint("ses_after", i), "acme"), 0); err != nil || !res.Created {
					return fmt.Errorf("create: %+v, %w", res, err)
				}
				_, err := creds.Add(ctx, credstore.Credential{ID: fmt.Sprint("k", i), Provider: "p", Secret: "sk"})
				return err
			}
			took, failed := recovery(ctx, t, "the stores' writes", start, writes)
			t.Logf("%s: %s promoted after %v, every write works on it after %v (%d rounds failed)",
				how, newMaster, promoted.Round(time.Millisecond), took.Round(time.Millisecond), failed)
			if took > 15*time.Second {
				t.Errorf("writes resumed after %v", took)
			}
			// No lasting READONLY, nor any other error.
			for range 30 {
				if err := writes(ctx); err != nil {
					t.Fatalf("write round %d after writes resumed: %v", i, err)
				}
			}
			rec, ok, err := plain.Load(ctx, id)
			if err != nil || !ok || rec.Tenant != "acme" {
				t.Fatalf("the session acknowledged before the failover: %+v, %v, %v", rec, ok, err)
			}
			if recs, err := plain.ListRecords(ctx, "acme", 0, 100); err != nil || len(recs) < 31 {
				t.Errorf("the tenant lists %d sessions, %v; want at least 31", len(recs), err)
			}
		})
	}
}
