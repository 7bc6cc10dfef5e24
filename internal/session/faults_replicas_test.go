package session_test

import (
	"context"
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
	conn, err := redisconn.New(redisconn.Options{Addrs: s.Addrs(), MasterName: redistest.MasterName, KeyPrefix: "test:"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sessionstore.NewRedis(conn.Client(), sessionstore.Options{KeyPrefix: "test:", EventBuffer: 4096, Timeout: conn.Timeout()})
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
	})
	t.Cleanup(func() {
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

// A prompt streams on replica A while the Sentinel master is killed: A's
// prompt ends (its stream gets a prompt_end), and once a replica is
// promoted replica B runs the session's next prompt. What the stored log
// looks like after the failover is logged, not asserted: without fencing,
// events acknowledged by the dead master and not replicated are lost, and
// their seqs can be written again; the lease can expire during the outage
// and the prompt end twice.
func TestReplicasPromptAcrossSentinelFailover(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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
	ends := 0
	for ends == 0 {
		e := next(t, sub)
		onA = append(onA, e)
		if e.Type == session.EventPromptEnd {
			ends++
			t.Logf("A's prompt ended %v after the kill: %s %q", time.Since(killed).Round(time.Millisecond), e.Outcome, e.Error)
		}
	}
	s.WaitMaster(ctx, old)

	// The next prompt, on B, once the store writes again.
	var sb *session.Session
	redistest.Eventually(ctx, t, "B finds the session", func(ctx context.Context) (bool, error) {
		sb, err = b.Get(ctx, "t", id)
		return err == nil, err
	})
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
	stored, err := stB.Events(ctx, id, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]int{}
	storedEnds, gaps := 0, 0
	var prev uint64
	for _, e := range stored {
		seen[e.Seq]++
		if e.Type == session.EventPromptEnd {
			storedEnds++
		}
		if prev != 0 && e.Seq != prev+1 {
			gaps++
		}
		prev = e.Seq
	}
	reusedOnB := 0
	lastA := onA[len(onA)-1].Seq
	for _, e := range onB {
		if e.Seq <= lastA {
			reusedOnB++
		}
	}
	t.Logf("A streamed seqs %d..%d; B's prompt %d..%d (%d of its seqs at or below A's last); the store holds %d events, %d prompt_end, %d gaps",
		onA[0].Seq, lastA, onB[0].Seq, onB[len(onB)-1].Seq, reusedOnB, len(stored), storedEnds, gaps)
}
