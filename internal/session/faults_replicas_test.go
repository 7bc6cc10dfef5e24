package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/sessionstore"
)

// sentinelReplica is a session manager on a Sentinel-managed Redis, as an
// agentd replica builds it.
func sentinelReplica(t *testing.T, s *redistest.Sentinels, pace sim.Options, lease time.Duration) (*session.Manager, *sessionstore.Redis) {
	t.Helper()
	return topologyReplica(t, redisconn.Options{Addrs: s.Addrs(), MasterName: redistest.MasterName, KeyPrefix: "test:"}, pace, lease)
}

// topologyReplica is a session manager on the Redis topology o names.
func topologyReplica(t *testing.T, o redisconn.Options, pace sim.Options, lease time.Duration) (*session.Manager, *sessionstore.Redis) {
	t.Helper()
	conn, err := redisconn.New(o)
	if err != nil {
		t.Fatal(err)
	}
	// The replica's log (its store's and its manager's), shown when the
	// test fails: what each replica did through the fault.
	logs := &syncBuffer{}
	st, err := sessionstore.NewRedis(conn.Client(), sessionstore.Options{KeyPrefix: "test:", EventBuffer: 4096, Timeout: conn.Timeout(),
		MinReplicaAcks: o.MinReplicaAcks, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo"},
			Client: simValidator{sim.New(pace)}}},
		Retry:    retry.DefaultSettings(),
		Shared:   st,
		LeaseTTL: lease,
		Rand:     func() float64 { return 0.5 },
		Logger:   slog.New(slog.NewTextHandler(logs, nil)),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the log of replica %p:\n%s", m, logs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		st.Close()
		conn.Close()
	})
	return m, st
}

// A prompt streams on replica A while the Sentinel master is killed.
// Whatever the failover kept, the session's log stays one: A's reader gets
// only stored events, and ends with the prompt's prompt_end or with a
// resume point (A found its lease or its stored events lost); resumed
// there on B, the prompt ends exactly once, B's next prompt completes, and
// the stored log is contiguous with every event a client saw in it.
func TestReplicasPromptAcrossSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, _ := sentinelReplica(t, s, sim.Options{TokenDelay: 20 * time.Millisecond}, 2*time.Second)
	b, stB := sentinelReplica(t, s, sim.Options{}, 2*time.Second)
	sess, err := a.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.ID()
	_, sub, err := sess.Prompt(ctx, "hello [[tokens: 300]]")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var onA []session.Event
	for len(onA) < 20 {
		onA = append(onA, next(t, sub))
	}
	old, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	s.Kill(old)
	var resumeAfter uint64
	for {
		e, err := sub.Next(ctx)
		var re *session.ResumeError
		if errors.As(err, &re) {
			resumeAfter = re.After
			t.Logf("A's reader told to resume after seq %d, %v after the kill", re.After, time.Since(killed).Round(time.Millisecond))
			break
		}
		if err != nil {
			t.Fatalf("A's reader: %v", err)
		}
		onA = append(onA, e)
		if e.Type == session.EventPromptEnd {
			resumeAfter = e.Seq
			t.Logf("A's prompt ended %v after the kill: %s %q", time.Since(killed).Round(time.Millisecond), e.Outcome, e.Error)
			break
		}
	}
	s.WaitMaster(ctx, old)

	var sb *session.Session
	redistest.Eventually(ctx, t, "B finds the session", func(ctx context.Context) (bool, error) {
		sb, err = b.Get(ctx, "t", id)
		return err == nil, err
	})
	// The first prompt ends once, wherever it ended.
	var resumed []session.Event
	if last := onA[len(onA)-1]; last.Type != session.EventPromptEnd || last.Seq != resumeAfter {
		redistest.Eventually(ctx, t, "B serves the first prompt's end", func(ctx context.Context) (bool, error) {
			rsub, err := sb.Subscribe(ctx, resumeAfter)
			if err != nil {
				return false, err
			}
			defer rsub.Close()
			resumed = resumed[:0]
			for {
				e, err := rsub.Next(ctx)
				if err != nil {
					return false, err
				}
				resumed = append(resumed, e)
				if e.Type == session.EventPromptEnd {
					return true, nil
				}
			}
		})
		t.Logf("the first prompt ended on resume: %s %q", resumed[len(resumed)-1].Outcome, resumed[len(resumed)-1].Error)
	}
	var onB []session.Event
	redistest.Eventually(ctx, t, "a prompt on B completes", func(ctx context.Context) (bool, error) {
		_, sub2, err := sb.Prompt(ctx, "again")
		if err != nil {
			return false, err
		}
		defer sub2.Close()
		onB = until(t, sub2, session.EventPromptEnd)
		return onB[len(onB)-1].Outcome == session.OutcomeCompleted, nil
	})
	if err := stB.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	checkLog(t, stB, id, onA, resumed, onB)
}

// follower is a client of one prompt: it reads the prompt's events from a
// replica and, told to resume (its replica lost the lease), drops what it
// got beyond the resume point and goes on from there on the next replica,
// until the prompt's prompt_end.
type follower struct {
	seen    []session.Event
	onEvent func() // when not nil, called after each event read
	resumes int
	on      int // the replica read now, an index of follow's ms
	end     session.Event
}

func (f *follower) follow(ctx context.Context, ms []*session.Manager, id, promptID string, sub *session.Subscription) error {
	at := 0
	for {
		e, err := sub.Next(ctx)
		var re *session.ResumeError
		switch {
		case errors.As(err, &re):
			toldAt := time.Now()
			sub.Close()
			f.resumes++
			for len(f.seen) > 0 && f.seen[len(f.seen)-1].Seq > re.After {
				f.seen = f.seen[:len(f.seen)-1]
			}
			// The next replica, once the store answers again. The errors
			// met on the way are kept: the last one, when the test's
			// bound ends the wait, is only the bound.
			var tried []string
			for {
				at = (at + 1) % len(ms)
				f.on = at
				s, gerr := ms[at].Get(ctx, "t", id)
				if gerr == nil {
					if sub, gerr = s.Subscribe(ctx, re.After); gerr == nil {
						break
					}
				}
				if errors.Is(gerr, session.ErrNotFound) {
					return fmt.Errorf("resume after %d: the session is gone: %w", re.After, gerr)
				}
				if n := len(tried); n == 0 || !strings.HasSuffix(tried[n-1], gerr.Error()) {
					tried = append(tried, fmt.Sprintf("%s %s", time.Now().Format("15:04:05.000"), gerr))
				}
				if ctx.Err() != nil {
					return fmt.Errorf("resume after %d (told at %s): %w; errors on the way:\n%s",
						re.After, toldAt.Format("15:04:05.000"), gerr, strings.Join(tried, "\n"))
				}
				t := time.NewTimer(100 * time.Millisecond)
				select {
				case <-t.C:
				case <-ctx.Done():
				}
			}
			continue
		case err != nil:
			// Where the client stood, for a wait that ran out: the session,
			// its last event and the resumes before it.
			last := "none"
			if n := len(f.seen); n > 0 {
				last = fmt.Sprintf("%d %s", f.seen[n-1].Seq, f.seen[n-1].Type)
			}
			return fmt.Errorf("session %s, prompt %s: %d events read (the last: %s) from replica %p, %d resumes: %w",
				id, promptID, len(f.seen), last, ms[f.on], f.resumes, err)
		}
		f.seen = append(f.seen, e)
		if f.onEvent != nil {
			f.onEvent()
		}
		if e.Type == session.EventPromptEnd && e.PromptID == promptID {
			f.end = e
			sub.Close()
			return nil
		}
	}
}

// followPrompts creates n sessions, alternately on ms[0] and ms[1], starts
// on each the prompt text(i) and follows it (resuming on the other replica
// when told to), calling onEvent (when not nil) after each event read. Each
// follower's outcome comes on errs; done is closed when all have ended.
func followPrompts(ctx context.Context, t *testing.T, ms []*session.Manager, n int, text func(i int) string,
	onEvent func()) (ids []string, fs []*follower, errs <-chan error, done <-chan struct{}) {
	t.Helper()
	ids = make([]string, n)
	fs = make([]*follower, n)
	out := make(chan error, n)
	all := make(chan struct{})
	var running sync.WaitGroup
	for i := range n {
		s, err := ms[i%2].Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = s.ID()
		promptID, sub, err := s.Prompt(ctx, text(i))
		if err != nil {
			t.Fatal(err)
		}
		fs[i] = &follower{onEvent: onEvent}
		running.Add(1)
		go func() {
			defer running.Done()
			out <- fs[i].follow(ctx, []*session.Manager{ms[i%2], ms[(i+1)%2]}, ids[i], promptID, sub)
		}()
	}
	go func() { running.Wait(); close(all) }()
	return ids, fs, out, all
}

// storedTail describes the last n events the store holds of session id.
func storedTail(st storedLog, id string, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := st.Events(ctx, id, 0, 1<<20)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs[max(len(evs)-n, 0):] {
		fmt.Fprintf(&b, "  %d %s %s %s\n", e.Seq, e.Type, e.PromptID, e.Outcome)
	}
	return b.String()
}

// N sessions prompt from two agentd replicas on a 6-node Redis Cluster
// (some streaming, some waiting in backoff) when the master of the first
// session's slot is killed. Every prompt ends, exactly once, for its client
// (which resumes on the other replica when told to); every session's
// stored log is contiguous from seq 1, holds one prompt_end per prompt and
// every event its client kept; and each session takes a next prompt.
func TestReplicasThroughClusterMasterKill(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	o := redisconn.Options{Addrs: cl.Addrs(), Cluster: true, KeyPrefix: "test:"}
	const lease = 2 * time.Second
	a, stA := topologyReplica(t, o, sim.Options{TokenDelay: 10 * time.Millisecond}, lease)
	b, _ := topologyReplica(t, o, sim.Options{TokenDelay: 10 * time.Millisecond}, lease)
	ms := []*session.Manager{a, b}
	const n = 8
	ids, fs, errs, _ := followPrompts(ctx, t, ms, n, func(i int) string {
		if i%4 >= 2 {
			return "[[faults: 503:retry-after=2,ok]] retry then stream [[tokens: 50]]"
		}
		return "stream [[tokens: 300]]"
	}, nil)
	// The master to kill: one holding a streaming session and one in
	// backoff, when the sessions' slots allow (they mostly do).
	kinds := map[*redistest.Server][2]int{}
	for i, id := range ids {
		m, err := cl.MasterOf(ctx, "test:{"+id+"}:meta")
		if err != nil {
			t.Fatal(err)
		}
		k := kinds[m]
		k[(i%4)/2]++
		kinds[m] = k
	}
	old, err := cl.MasterOf(ctx, "test:{"+ids[0]+"}:meta")
	if err != nil {
		t.Fatal(err)
	}
	for m, k := range kinds {
		if k[0] > 0 && k[1] > 0 {
			old = m
		}
	}
	t.Logf("killing %s: %d streaming sessions and %d in backoff on it", old.Addr(), kinds[old][0], kinds[old][1])
	// What the test holds the failover to: every session and prompt start
	// acknowledged by the replica (the stream's events after it may be lost,
	// and fencing copes). Without it a session created a moment before the
	// kill can be gone on the promoted replica, as replication is
	// asynchronous (min_replica_acks closes that window).
	cl.WaitReplicated(ctx, old)
	killed := time.Now()
	cl.Kill(old)
	for range n {
		if err := <-errs; err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				// Every goroutine's stack, to tell which wait never ended,
				// and each session's stored tail.
				buf := make([]byte, 1<<20)
				t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
				for _, id := range ids {
					t.Logf("the stored tail of %s:\n%s", id, storedTail(stA, id, 12))
				}
			}
			t.Fatal(err)
		}
	}
	t.Logf("every prompt ended %v after the kill", time.Since(killed).Round(time.Millisecond))
	for _, id := range ids {
		if m, _ := cl.MasterOf(ctx, "test:{"+id+"}:meta"); m == old {
			cl.WaitFailover(ctx, "test:{"+id+"}:meta", old)
			break
		}
	}
	outcomes := map[string]int{}
	resumed := 0
	for i, f := range fs {
		outcomes[f.end.Outcome]++
		resumed += f.resumes
		// Each session goes on: a next prompt completes.
		redistest.Eventually(ctx, t, "a next prompt of "+ids[i], func(ctx context.Context) (bool, error) {
			s, err := ms[i%2].Get(ctx, "t", ids[i])
			if err != nil {
				return false, err
			}
			_, sub, err := s.Prompt(ctx, "again")
			if err != nil {
				return false, err
			}
			defer sub.Close()
			evs := until(t, sub, session.EventPromptEnd)
			f.seen = append(f.seen, evs...)
			return last(evs).Outcome == session.OutcomeCompleted, nil
		})
		checkLog(t, stA, ids[i], f.seen)
	}
	t.Logf("prompts through the fault: %v; %d readers told to resume elsewhere", outcomes, resumed)
}

// A Redis Cluster resharded under load, as an operator adding a master
// does: the slot of each of N sessions, some streaming and some waiting in
// backoff, moves to another master while its prompt runs, two keys at a
// time (a session's keys end up split across the two masters for a
// while), and each of the migration's states (the slot MIGRATING, its keys
// split, the last ones moved) is held open while the prompts write events.
// Every prompt completes, exactly once, without its client being told to
// resume elsewhere; every stored log is contiguous with every event its
// client saw, and its history holds every answer; and every session takes
// a next prompt on the other replica at once (the first prompt's run ended
// in the store). With min_replica_acks too: those writes run on the slot's
// master, not through the Cluster's routing.
func TestReplicasThroughClusterReshard(t *testing.T) {
	cl := redistest.StartCluster(t)
	for _, acks := range []int{0, 1} {
		t.Run(fmt.Sprintf("min_replica_acks=%d", acks), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			o := redisconn.Options{Addrs: cl.Addrs(), Cluster: true, KeyPrefix: "test:", MinReplicaAcks: acks}
			const lease = 2 * time.Second
			a, stA := topologyReplica(t, o, sim.Options{TokenDelay: 10 * time.Millisecond}, lease)
			b, _ := topologyReplica(t, o, sim.Options{TokenDelay: 10 * time.Millisecond}, lease)
			ms := []*session.Manager{a, b}
			const n = 6
			progress := make(chan struct{}, 1<<16)
			ids, fs, errs, done := followPrompts(ctx, t, ms, n, func(i int) string {
				if i%3 == 2 {
					return "[[faults: 503:retry-after=1,ok]] retry then stream [[tokens: 100]]"
				}
				return "stream [[tokens: 400]]"
			}, func() {
				select {
				case progress <- struct{}{}:
				default:
				}
			})
			// hold keeps a state of the migration while the prompts write
			// a few more events (or until they have all ended).
			hold := func() {
				for range 20 {
					select {
					case <-progress:
					case <-done:
						return
					case <-ctx.Done():
						return
					}
				}
			}
			masters := cl.Masters(ctx)
			moved := map[int]bool{}
			for _, id := range ids {
				key := "test:{" + id + "}:meta"
				slot, err := cl.Slot(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if moved[slot] {
					continue
				}
				moved[slot] = true
				from, err := cl.MasterOf(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				to := masters[0]
				for _, m := range masters {
					if m != from {
						to = m
						break
					}
				}
				keys := cl.MoveSlot(ctx, slot, to, 2, hold)
				t.Logf("session %s: slot %d moved from %s to %s (%d keys)", id, slot, from.Addr(), to.Addr(), keys)
			}
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for i, f := range fs {
				if f.end.Outcome != session.OutcomeCompleted || f.resumes != 0 {
					t.Errorf("session %s: prompt_end %s %q after %d resumes", ids[i], f.end.Outcome, f.end.Error, f.resumes)
				}
				s, err := ms[(i+1)%2].Get(ctx, "t", ids[i])
				if err != nil {
					t.Fatal(err)
				}
				_, sub, err := s.Prompt(ctx, "again")
				if err != nil {
					t.Fatalf("session %s: a next prompt: %v", ids[i], err)
				}
				evs := until(t, sub, session.EventPromptEnd)
				sub.Close()
				if end := last(evs); end.Outcome != session.OutcomeCompleted {
					t.Errorf("session %s: the next prompt ended %s %q", ids[i], end.Outcome, end.Error)
				}
				f.seen = append(f.seen, evs...)
				checkLog(t, stA, ids[i], f.seen)
				// The history holds both prompts' question and answer (and
				// the failed call's error entry before a retry's answer).
				entries, _, err := s.Messages(ctx, 0, 100)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, e := range entries {
					got = append(got, string(e.Message.Role)+":"+string(e.Message.StopReason))
				}
				want := "user: assistant:stop user: assistant:stop"
				if i%3 == 2 {
					want = "user: assistant:error assistant:stop user: assistant:stop"
				}
				if strings.Join(got, " ") != want {
					t.Errorf("session %s: history %q, want %q", ids[i], got, want)
				}
			}
		})
	}
}

// A single Redis restarted empty (no persistence) while one session
// streams and another waits in backoff: both owners find their leases gone
// and stop without a word more, their readers are told where to resume, and
// resuming finds the sessions gone (NOT_FOUND), not a hang; new sessions
// work on both replicas at once.
func TestReplicasRedisRestartedEmpty(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{TokenDelay: 10 * time.Millisecond}, time.Second)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	streaming, err := a.m.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := b.m.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	_, onA, err := streaming.Prompt(ctx, "a long answer [[tokens: 2000]]")
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()
	_, onB, err := waiting.Prompt(ctx, "[[faults: 503:retry-after=30,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Close()
	until(t, onA, session.EventMessageUpdate)
	until(t, onB, session.EventAutoRetryStart)
	srv.Kill()
	srv.Start()
	for _, c := range []struct {
		m   *session.Manager
		id  string
		sub *session.Subscription
	}{{a.m, streaming.ID(), onA}, {b.m, waiting.ID(), onB}} {
		seen, resume := untilResume(t, c.sub)
		if only(seen, session.EventPromptEnd) != nil {
			t.Fatalf("%s: a prompt_end the store never had: %v", c.id, kinds(seen))
		}
		for _, m := range []*session.Manager{a.m, b.m} {
			_, err := m.Get(ctx, "t", c.id)
			if !errors.Is(err, session.ErrNotFound) {
				t.Fatalf("%s: resuming after %d: Get = %v, want not found", c.id, resume.After, err)
			}
		}
	}
	for _, m := range []*session.Manager{a.m, b.m} {
		s, err := m.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		_, sub, err := s.Prompt(ctx, "hello")
		if err != nil {
			t.Fatal(err)
		}
		if end := last(until(t, sub, session.EventPromptEnd)); end.Outcome != session.OutcomeCompleted {
			t.Fatalf("a new session after the restart: %+v", end)
		}
		sub.Close()
	}
}
