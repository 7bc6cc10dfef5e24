package session

import (
	"context"
	"errors"
	"time"
)

// Fencing: what a replica does when it finds that the prompt it runs is no
// longer its own.
//
// Every write of a prompt carries its lease's epoch,
// and the store refuses it (ErrFenced) once the lease is another replica's
// (it expired while this replica was cut off from the store, and another
// took the prompt over). A session's log delivers only what the store
// holds, so no reader here has seen an event the stored log lacks.
// When the lease is found lost (a refused write, a refused renewal, a lease
// unrenewable for its whole TTL, or a stored stream that lost events) the
// replica stops the prompt without a word more: nothing it would write
// could be stored, and nothing it says may contradict the stored log. Its
// readers end with a *ResumeError naming the seq to resume from, on any
// replica. The replica that takes the prompt over goes on from the stored
// log: it resumes a retry in backoff at its due time, or ends the prompt
// (owner lost), exactly once.

// eventsStored: the store holds id's events up to seq.
func (m *Manager) eventsStored(id string, seq uint64) {
	if s := m.local(id); s != nil {
		s.log.stored(seq)
	}
}

// eventsLost: id's queued events will never be stored; stored is the
// newest seq the store holds of them (0: unknown).
func (m *Manager) eventsLost(id string, stored uint64, err error) {
	s := m.local(id)
	if s == nil {
		return
	}
	// Not on the store's writer: the session's lock can be held across a
	// store call.
	m.goBackground(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.fenceLocked(stored, err)
	})
}

// goBackground runs f on a goroutine of its own that Close waits for,
// unless the manager is closed: then it reports false and f does not run.
// It may be called with a session's lock held (the manager's is taken
// after it: the only order they are taken in together).
func (m *Manager) goBackground(f func()) bool {
	m.mu.RLock()
	closed := m.closed
	if !closed {
		m.bg.Add(1)
	}
	m.mu.RUnlock()
	if closed {
		return false
	}
	go func() {
		defer m.bg.Done()
		f()
	}()
	return true
}

// local is this replica's copy of session id, nil when it has none.
func (m *Manager) local(id string) *Session {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.sessions[id]
}

// fenceLocked stops this replica's part in the running prompt, whose lease
// it lost (cause says how): its log takes no more events and drops those
// the store lacks, so that its readers end with a *ResumeError after the
// newest stored one, and the run stops without ending the prompt (another
// replica ends or resumes it). stored is the newest seq the store holds
// (0: the newest it confirmed).
func (s *Session) fenceLocked(stored uint64, cause error) {
	if s.fenced || s.checking {
		return
	}
	// With no point named, the point is the store's to tell: what it
	// confirmed may be gone (a failover lost it), and a reader sent there
	// would wait for events that never come. The readers wait for the
	// check (checkStored), which fences the log.
	checking := stored == 0 && s.checkStoredLocked()
	at := stored
	if !checking {
		at = s.log.fence(stored)
	}
	if !s.running {
		// Events of no prompt (nothing of a prompt to stop): the log goes
		// on from the stored point.
		if !checking {
			s.log.unfence()
		}
		s.m.log.Warn("events not stored: this replica's copy of the log goes back to the stored one",
			"session", s.id, "seq", at, "err", cause)
		return
	}
	s.fenced = true
	// The working copy may be ahead of the store: the next prompt here
	// rebuilds it from the stored history.
	s.ctxEntries = -1
	s.m.log.Error("session lease lost: the prompt stops here without a word more; another replica goes on from the stored log",
		"session", s.id, "prompt", s.promptID, "stored_seq", at, "err", cause)
	s.m.opts.Observer.Takeover(TakeoverLeaseLost)
	s.abortLocked(stopLeaseLost)
}

// checkStoredLocked suspends the log and starts the check of what the
// store holds of it (checkStored), which fences the log at that point.
// It reports false when the manager is closing: the log is not suspended,
// and the caller fences it at the point the store confirmed.
func (s *Session) checkStoredLocked() bool {
	// The check waits for s.mu, held here, before it touches the log.
	if !s.m.goBackground(s.checkStored) {
		return false
	}
	s.checking = true
	s.log.suspend()
	return true
}

// checkStored finds the newest event of the log that the store holds the
// same (storedPoint), trying for half a lease while the store does not
// answer, and fences the log there: its readers end with a *ResumeError
// after that seq, which every replica can serve. A store that does not
// answer in time (a replica cut off from it, a failover slower than
// that), or a manager closing, leaves the point the store confirmed.
func (s *Session) checkStored() {
	bound := time.Now().Add(s.m.leaseTTL() / 2)
	wait := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithDeadline(s.m.baseCtx, bound)
		at, err := s.storedPoint(ctx)
		// Done when answered, or out of time (the bound, or Close).
		done := err == nil || ctx.Err() != nil || !time.Now().Add(wait).Before(bound)
		cancel()
		if done {
			s.mu.Lock()
			at = s.log.fenceAt(at, err != nil)
			s.checking = false
			if !s.running {
				s.log.unfence()
				s.kickMirrorLocked()
			}
			s.mu.Unlock()
			if err != nil {
				s.m.log.Warn("session log not checked against the store: its readers resume after the newest event the store confirmed",
					"session", s.id, "seq", at, "err", err)
			} else {
				s.m.log.Info("session log checked against the store: its readers resume after the newest event it holds",
					"session", s.id, "seq", at)
			}
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.m.baseCtx.Done():
			t.Stop()
		}
		wait *= 2
	}
}

// storedPoint is the seq up to which the store holds the very events the
// log delivered: the newest of them when it holds all, else the one before
// the first it lacks or holds otherwise (a failover lost what the old
// master confirmed, and a replica that took the prompt over stored others
// at those seqs). Events the store trimmed already are taken as held.
// With nothing delivered held here, it is the newest delivered seq.
func (s *Session) storedPoint(ctx context.Context) (uint64, error) {
	ms, upTo := s.log.delivered()
	if len(ms) == 0 {
		return upTo, nil
	}
	evs, err := s.m.events.Events(ctx, s.id, ms[0].seq-1, len(ms))
	if err != nil {
		return 0, err
	}
	if len(evs) == 0 {
		return ms[0].seq - 1, nil
	}
	first := evs[0].Seq
	for _, m := range ms {
		if m.seq < first {
			continue // trimmed from the store
		}
		if i := m.seq - first; i >= uint64(len(evs)) || !m.is(&evs[i]) {
			return m.seq - 1, nil
		}
	}
	return ms[len(ms)-1].seq, nil
}

// fenceOnLocked fences the prompt when err says its lease is lost.
func (s *Session) fenceOnLocked(err error) {
	if errors.Is(err, ErrFenced) {
		s.fenceLocked(0, err)
	}
}

// endFencedLocked resets what the fenced run left, as a run handed over
// does, and lets the log take events again (from the stored point on).
func (s *Session) endFencedLocked() {
	s.fenced, s.handoff = false, false
	s.chain = chain{}
	s.switchedTo = pickedCred{}
	s.waiting = nil
	s.running, s.cancelRun, s.promptID = false, nil, ""
	if !s.checking {
		// (A check under way unfences the log when it is done.)
		s.log.unfence()
		s.kickMirrorLocked()
	}
}
