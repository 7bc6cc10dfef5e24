package session_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/sessionstore"
	"github.com/agentd/agentd/internal/testkit"
)

// failoverProxy is the address the replicas know their Redis by: a TCP
// relay to the master of the moment. Switching it to the replica, with
// every relayed connection closed, is a failover as the replicas see one.
type failoverProxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
}

func startFailoverProxy(t *testing.T, target string) *failoverProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &failoverProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.relay(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.closeAll()
		wg.Wait()
	})
	return p
}

func (p *failoverProxy) Addr() string { return p.ln.Addr().String() }

func (p *failoverProxy) relay(c net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.Dial("tcp", target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

func (p *failoverProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// failOver points the proxy at addr and ends every relayed connection.
func (p *failoverProxy) failOver(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
	p.closeAll()
}

// lossyFailover is a master and its replica behind a failoverProxy. freeze
// stops the replica's replication (it keeps what it has), so that what the
// master confirms afterwards is lost when failOver promotes the replica:
// an asynchronous replication's failover, whose window the test chooses.
type lossyFailover struct {
	master, replica *redistest.Server
	proxy           *failoverProxy
}

func startLossyFailover(t *testing.T) *lossyFailover {
	t.Helper()
	m := redistest.Start(t)
	r := redistest.StartWith(t, "--replicaof", "127.0.0.1", strconv.Itoa(m.Port()))
	lf := &lossyFailover{master: m, replica: r, proxy: startFailoverProxy(t, m.Addr())}
	lf.sync(t)
	return lf
}

// sync waits until the replica has every write the master took.
func (lf *lossyFailover) sync(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	mc := redistest.Client(t, lf.master.Addr())
	for {
		n, err := mc.Wait(ctx, 1, time.Second).Result()
		if err == nil && n >= 1 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("replica not in sync: %d replicas, %v", n, err)
		}
	}
}

// freeze stops the replica's replication: what the master takes from now
// on, the replica never has.
func (lf *lossyFailover) freeze(t *testing.T) {
	t.Helper()
	lf.sync(t)
	if err := redistest.Client(t, lf.replica.Addr()).Do(t.Context(), "replicaof", "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
}

// frozenSeq is the newest event of session id the frozen replica has.
func (lf *lossyFailover) frozenSeq(t *testing.T, id string) uint64 {
	t.Helper()
	msgs, err := redistest.Client(t, lf.replica.Addr()).XRevRangeN(t.Context(), "test:{"+id+"}:events", "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		t.Fatalf("the replica's stream: %v, %v", msgs, err)
	}
	seq, err := strconv.ParseUint(strings.TrimSuffix(msgs[0].ID, "-0"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// failOver kills the master and promotes the frozen replica.
func (lf *lossyFailover) failOver() {
	lf.master.Kill()
	lf.proxy.failOver(lf.replica.Addr())
}

// A failover loses stream events the old master confirmed, which readers
// on the owner and on a following replica got already; the owner finds the
// stored stream short and stops, and the prompt is ended from the stored
// log. Every reader is told to resume after the newest event the store
// kept, not after what it read: a reader sent further would wait for
// events the store now has under lower seqs. Resumed there, each sees the
// prompt's one end, and the stored log holds what the readers kept.
func TestReplicasFailoverLosesConfirmedEvents(t *testing.T) {
	lf := startLossyFailover(t)
	const lease = time.Second
	a := newReplica(t, lf.proxy.Addr(), retry.DefaultSettings(), sim.Options{TokenDelay: 20 * time.Millisecond}, lease)
	b := newReplica(t, lf.proxy.Addr(), retry.DefaultSettings(), sim.Options{}, lease)
	s, onB := createFollowed(t, a, b)
	_, onA, err := s.Prompt(t.Context(), "a long answer [[tokens: 1000]]")
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()
	kept := until(t, onB, session.EventMessageUpdate)
	lf.freeze(t)
	frozen := lf.frozenSeq(t, s.ID())
	// The store confirmed these (they reached B through it); the replica
	// that is about to be promoted does not have them.
	var lost []session.Event
	for len(lost) == 0 || last(lost).Seq < frozen+5 {
		e := next(t, onB)
		if e.Seq <= frozen {
			kept = append(kept, e)
		} else {
			lost = append(lost, e)
		}
	}
	lf.failOver()

	for name, sub := range map[string]*session.Subscription{"the owner's": onA, "the follower's": onB} {
		seen, resume := untilResume(t, sub)
		if name == "the follower's" {
			seen = append(append(kept, lost...), seen...)
		}
		stored := resume.After
		if newest := lost[len(lost)-1].Seq; stored >= newest {
			t.Fatalf("%s reader: resume after %d, beyond the store's (the failover lost seqs up to %d)", name, stored, newest)
		}
		for len(seen) > 0 && last(seen).Seq > stored {
			seen = seen[:len(seen)-1]
		}
		onRes, err := get(t, b.m, s.ID()).Subscribe(t.Context(), stored)
		if err != nil {
			t.Fatalf("%s reader: resume after %d: %v", name, stored, err)
		}
		evs := until(t, onRes, session.EventPromptEnd)
		onRes.Close()
		if end := last(evs); end.Outcome != session.OutcomeFailed || end.Error != session.ErrOwnerLost {
			t.Fatalf("%s reader: prompt_end %+v", name, end)
		}
		checkLog(t, b.store, s.ID(), append(seen, evs...))
	}
}

// The owner waits in a backoff when the failover comes, having told its
// reader of the failed attempt's events, which the old master alone
// confirmed; the promoted replica has neither those nor a live lease (its
// copy expired while the old master took the renewals). The refused
// renewal fences the prompt with no stored point named: the owner asks the
// store, and its reader is told to resume after the newest event the store
// kept, where another replica ends the prompt.
func TestReplicasFailoverLosesConfirmedEventsInBackoff(t *testing.T) {
	lf := startLossyFailover(t)
	const lease = time.Second
	// The first attempt fails after a second: the time to freeze the
	// replica with the prompt's start and first events on it.
	a := newReplica(t, lf.proxy.Addr(), retry.DefaultSettings(), sim.Options{FirstTokenDelay: time.Second}, lease)
	b := newReplica(t, lf.proxy.Addr(), retry.DefaultSettings(), sim.Options{}, lease)
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	_, onA, err := s.Prompt(t.Context(), "[[faults: 503:retry-after=60,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()
	kept := until(t, onA, session.EventMessageStart)
	lf.freeze(t)
	lost := until(t, onA, session.EventAutoRetryStart)
	// The replica's copy of the lease runs out: it takes no renewal now.
	rc := redistest.Client(t, lf.replica.Addr())
	redistest.Eventually(t.Context(), t, "the replica's copy of the lease expired", func(ctx context.Context) (bool, error) {
		n, err := rc.Exists(ctx, "test:{"+s.ID()+"}:lease").Result()
		return n == 0, err
	})
	lf.failOver()
	seen, resume := untilResume(t, onA)
	if len(seen) > 0 {
		t.Fatalf("events after the failover: %v", kinds(seen))
	}
	if resume.After != last(kept).Seq {
		t.Fatalf("resume after %d, want %d: the newest event the store kept (the reader got up to %d)",
			resume.After, last(kept).Seq, last(lost).Seq)
	}
	onB, err := get(t, b.m, s.ID()).Subscribe(t.Context(), resume.After)
	if err != nil {
		t.Fatalf("resume after %d: %v", resume.After, err)
	}
	defer onB.Close()
	evs := until(t, onB, session.EventPromptEnd)
	if end := last(evs); end.Outcome != session.OutcomeFailed || end.Error != session.ErrOwnerLost {
		t.Fatalf("prompt_end %+v", end)
	}
	checkLog(t, b.store, s.ID(), kept, evs)
}

// With min_replica_acks a prompt starts only once its start is on the
// replica. The replica's replication stopped, the next prompt is refused
// UNAVAILABLE (it would otherwise start on the master alone and the
// failover below would lose it whole, after its client saw it start), and
// it leaves nothing: once the replica is promoted, the session holds the
// first prompt alone, no lease, and its next prompt runs at once.
func TestReplicasPromptStartAcknowledged(t *testing.T) {
	lf := startLossyFailover(t)
	const lease = time.Second
	acked := sessionstore.Options{MinReplicaAcks: 1, AckTimeout: 300 * time.Millisecond, Timeout: 3 * time.Second}
	a := newReplicaOf(t, lf.proxy.Addr(), acked, retry.DefaultSettings(), sim.Options{}, lease)
	b := newReplica(t, lf.proxy.Addr(), retry.DefaultSettings(), sim.Options{}, lease)
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	_, sub, err := s.Prompt(t.Context(), "first")
	if err != nil {
		t.Fatal(err)
	}
	first := until(t, sub, session.EventPromptEnd)
	sub.Close()
	if end := last(first); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("first prompt_end %+v", end)
	}

	lf.freeze(t)
	mc := redistest.Client(t, lf.master.Addr())
	testkit.Eventually(t, "the master sees its replica gone", func() bool {
		info, _ := mc.Info(t.Context(), "replication").Result()
		return strings.Contains(info, "connected_slaves:0")
	})
	if _, sub, err := s.Prompt(t.Context(), "second"); !errors.Is(err, session.ErrUnavailable) || !strings.Contains(err.Error(), "replicas") {
		if sub != nil {
			sub.Close()
		}
		t.Fatalf("a prompt whose start no replica confirmed = %v, want ErrUnavailable naming the replicas", err)
	}
	lf.failOver()

	onB := get(t, b.m, s.ID())
	entries, total, err := onB.Messages(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if total != 2 || len(entries) != 2 || entries[0].PromptID != last(first).PromptID {
		t.Fatalf("the history after the failover: %d entries %+v, want the first prompt's two", total, entries)
	}
	if h, err := b.store.Holder(t.Context(), s.ID()); h != "" || err != nil {
		t.Fatalf("holder %q (%v) after the refused prompt", h, err)
	}
	_, sub, err = onB.Prompt(t.Context(), "third")
	if err != nil {
		t.Fatal(err)
	}
	third := until(t, sub, session.EventPromptEnd)
	sub.Close()
	if end := last(third); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("third prompt_end %+v", end)
	}
	checkLog(t, b.store, s.ID(), first, third)
}

// A pull of the stored log that is under way when a prompt of this
// replica publishes events the store has not confirmed yet (its writes
// held up: a busy Redis) leaves them alone: they are on their way to the
// store, not lost from it. (A pull that took them for lost took the log
// back to the stored point, and the prompt's own readers were told to
// resume, its client's stream cut, while nothing had failed.)
func TestReplicasPullLeavesOwnPromptAlone(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{TokenDelay: 5 * time.Millisecond}, 5*time.Second)
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	// A reader of the session: its copy follows the stored log.
	follow, err := s.Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()
	_, sub, err := s.Prompt(t.Context(), "a long answer [[tokens: 200]]")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	seen := until(t, sub, session.EventMessageUpdate)

	rc := redistest.Client(t, srv.Addr())
	if err := rc.Do(t.Context(), "client", "pause", 2000, "write").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "events of the prompt waiting for the store", func() bool { return session.HoldsOwnEvents(s) })
	pullErr := session.Pull(t.Context(), s)
	if err := rc.Do(t.Context(), "client", "unpause").Err(); err != nil {
		t.Fatal(err)
	}
	if pullErr != nil {
		t.Fatalf("pull: %v", pullErr)
	}
	seen = append(seen, until(t, sub, session.EventPromptEnd)...)
	if end := last(seen); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end %+v", end)
	}
	checkLog(t, a.store, s.ID(), seen)
}
