package session

import (
	"context"
	"time"
)

// ownerStateTimeout bounds how long Snapshot waits for the replica that
// runs the session to tell its state. A live owner answers within
// milliseconds; one that is gone (killed, cut off, or on a Redis Cluster
// where a missing receiver cannot be told at once) is not waited for: its
// stored run tells what the prompt was doing.
const ownerStateTimeout = 500 * time.Millisecond

// storedRunState is st (this replica's copy of the session) with the
// status the stored run gives, for a session whose owner does not answer:
// a retry waiting in backoff is retrying (its attempt is the run's), a
// run without one is streaming (another replica ends it, or resumes it,
// once the owner's lease expires), no run or an ending one is idle. A
// store that cannot be read leaves the copy's view, counted as running.
func (s *Session) storedRunState(ctx context.Context, st State) State {
	run, ok, err := s.m.opts.Shared.LoadRun(ctx, s.id)
	switch {
	case err != nil:
		st.Status = StatusStreaming
	case !ok || run.Ending:
		st.Status, st.IsRetrying, st.RetryAttempt = StatusIdle, false, 0
	case run.Attempt > 0 && !run.Due.IsZero():
		st.Status, st.IsRetrying, st.RetryAttempt = StatusRetrying, true, run.Attempt
	default:
		st.Status = StatusStreaming
	}
	return st
}
