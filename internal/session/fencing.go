package session

import (
	"errors"
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
	m.mu.RLock()
	closed := m.closed
	if !closed {
		m.bg.Add(1)
	}
	m.mu.RUnlock()
	if closed {
		return
	}
	go func() {
		defer m.bg.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.fenceLocked(stored, err)
	}()
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
	if s.fenced {
		return
	}
	at := s.log.fence(stored)
	if !s.running {
		// Events of no prompt (nothing of a prompt to stop): the log goes
		// on from the stored point.
		s.log.unfence()
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
	s.log.unfence()
	s.kickMirrorLocked()
}
