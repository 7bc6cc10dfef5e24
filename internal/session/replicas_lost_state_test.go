package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// GetSession of a session whose owning replica died while its prompt waits
// in backoff: another replica answers with the stored state (retrying, the
// attempt the run stored), not "streaming", and does not wait for the lost
// owner's answer.
func TestReplicasSnapshotOfLostOwner(t *testing.T) {
	t.Run("owner gone", func(t *testing.T) { snapshotOfLostOwner(t, false) })
	// Still subscribed to its control channel but answering nothing (a
	// frozen process, a partition; on a Redis Cluster a missing receiver
	// cannot be told at once either): not waited for.
	t.Run("owner frozen", func(t *testing.T) { snapshotOfLostOwner(t, true) })
}

func snapshotOfLostOwner(t *testing.T, frozen bool) {
	srv := redistest.Start(t)
	// A lease long enough that the takeover does not happen during the test.
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Minute)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Minute)
	s, follow := createFollowed(t, a, b)
	_, sub, err := s.Prompt(t.Context(), "wait [[faults: 529:retry-after=60,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	until(t, follow, session.EventAutoRetryStart)
	if frozen {
		unfreeze := make(chan struct{})
		defer close(unfreeze)
		a.store.Serve(func(ctx context.Context, c session.Control) session.Reply {
			select {
			case <-unfreeze:
			case <-ctx.Done():
			}
			return session.Reply{}
		})
	} else {
		a.lose()
	}

	start := time.Now()
	st, err := get(t, b.m, s.ID()).Snapshot(t.Context())
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GetSession of a lost owner's session: %v", took)
	if st.Status != session.StatusRetrying || !st.IsRetrying || st.RetryAttempt != 1 {
		t.Fatalf("state of a lost owner's session in backoff = status %q, retrying %v, attempt %d; want the stored run's: retrying, attempt 1",
			st.Status, st.IsRetrying, st.RetryAttempt)
	}
}
