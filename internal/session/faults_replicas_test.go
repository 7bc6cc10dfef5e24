package session_test

import (
	"context"
	"errors"
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
