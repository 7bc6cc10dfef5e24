package session

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Control calls between replicas: a call reaching a replica that does not
// run the session's prompt goes to the one that does (the lease holder),
// over the store's control bus (ControlBus).

// runsHere reports whether the session's prompt runs on this replica (a
// fenced one no longer does: another replica ends or resumes it).
func (s *Session) runsHere() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running && !s.fenced
}

// remoteOwner is the replica running s's prompt when it is another one; ""
// when the prompt runs here, none runs, or there is no shared store.
func (s *Session) remoteOwner(ctx context.Context) (string, error) {
	if s.runsHere() {
		return "", nil
	}
	holder, err := s.m.leases.Holder(ctx, s.id)
	if err != nil {
		return "", unavailable("read the session's lease", err)
	}
	if holder == s.m.bus.ReplicaID() {
		return "", nil
	}
	return holder, nil
}

// control sends c to owner and maps its reply onto the session API's errors.
func (s *Session) control(ctx context.Context, owner string, c Control) error {
	c.SessionID = s.id
	rep, err := s.m.bus.Call(ctx, owner, c)
	switch {
	case errors.Is(err, ErrNoReplica):
		return fmt.Errorf("%w: replica %s runs the session but is not reachable (another replica takes its prompt over once its lease expires)", ErrUnavailable, owner)
	case err != nil:
		return unavailable("reach replica "+owner, err)
	}
	return replyError(rep)
}

func replyError(rep Reply) error {
	switch rep.Err {
	case "", ReplyNotOwner:
		// Not owner: the prompt ended meanwhile; the call is a no-op on an
		// idle session, except tool results, which nothing waits for.
		return nil
	case ReplyInvalid:
		return &InvalidError{Field: rep.Field, Msg: rep.Msg}
	case ReplyNotWaiting:
		return ErrNotWaiting
	default:
		return errors.New(rep.Msg)
	}
}

// handleControl runs a control call another replica sent to this one.
func (m *Manager) handleControl(ctx context.Context, c Control) Reply {
	m.mu.RLock()
	s, ok := m.sessions[c.SessionID]
	m.mu.RUnlock()
	if !ok || !s.runsHere() {
		if c.Op == OpSubmitToolResults {
			return Reply{Err: ReplyNotWaiting}
		}
		return Reply{Err: ReplyNotOwner}
	}
	var err error
	switch c.Op {
	case OpState:
		st := s.State()
		return Reply{State: &st}
	case OpAbortRetry:
		s.mu.Lock()
		s.abortRetryLocked(stopUser)
		s.mu.Unlock()
	case OpAbort:
		err = s.abort(ctx, stopOfCause(c.Cause))
	case OpSubmitToolResults:
		err = s.submitToolResults(c.Results)
	case OpSetAutoRetry:
		s.setAutoRetry(c.Enabled)
	default:
		return Reply{Err: ReplyOther, Msg: fmt.Sprintf("unknown control operation %q", c.Op)}
	}
	var inv *InvalidError
	switch {
	case err == nil:
		return Reply{}
	case errors.As(err, &inv):
		return Reply{Err: ReplyInvalid, Field: inv.Field, Msg: inv.Msg}
	case errors.Is(err, ErrNotWaiting):
		return Reply{Err: ReplyNotWaiting}
	default:
		return Reply{Err: ReplyOther, Msg: err.Error()}
	}
}

// Snapshot is State, asking the replica that runs the session when it is
// another one.
func (s *Session) Snapshot(ctx context.Context) (State, error) {
	owner, err := s.remoteOwner(ctx)
	if err != nil {
		return State{}, err
	}
	st := s.State()
	s.mu.Lock()
	st.LastSeq = max(st.LastSeq, s.storedSeq)
	s.mu.Unlock()
	if owner == "" {
		return st, nil
	}
	cctx, cancel := context.WithTimeout(ctx, ownerStateTimeout)
	rep, err := s.m.bus.Call(cctx, owner, Control{Op: OpState, SessionID: s.id})
	cancel()
	if err == nil && rep.State != nil {
		return *rep.State, nil
	}
	// The owner ended its prompt meanwhile.
	if err == nil && rep.Err == ReplyNotOwner {
		return st, nil
	}
	// The owner does not answer (lost: its prompt is taken over once its
	// lease expires): the stored run says what the prompt was doing.
	return s.storedRunState(ctx, st), nil
}

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
	run, ok, err := s.m.leases.LoadRun(ctx, s.id)
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
