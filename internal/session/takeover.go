package session

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// Takeover: the janitor of every replica takes over the prompts whose
// lease expired (their replica was lost), resuming a retry in backoff at
// its due time and ending any other; a replica shutting down hands its
// retries in backoff over the same way.

// ErrOwnerLost ends a prompt whose replica was lost.
const ErrOwnerLost = "owner replica lost"

// janitor takes over the running prompts whose replica was lost.
func (m *Manager) janitor() {
	t := time.NewTicker(m.leaseTTL() / 2)
	defer t.Stop()
	for {
		select {
		case <-m.baseCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(m.baseCtx, m.leaseTTL())
		m.sweep(ctx)
		cancel()
		m.evictIdle()
	}
}

// sweep takes over every running prompt without a lease.
func (m *Manager) sweep(ctx context.Context) {
	ids, err := m.leases.Running(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("janitor: running sessions not listed", "err", err)
		}
		return
	}
	for _, id := range ids {
		holder, err := m.leases.Holder(ctx, id)
		if err != nil || holder != "" {
			continue
		}
		if err := m.takeOver(ctx, id); err != nil && ctx.Err() == nil {
			m.log.Warn("janitor: prompt not taken over", "session", id, "err", err)
		}
	}
}

// resumePoint is how a taken-over prompt goes on.
type resumePoint struct {
	lost bool // end it: its owner was lost outside a backoff
	// What the lost owner left open, from the stored events: a message
	// (message_start without message_end, with its model) and a run
	// (agent_start without agent_end).
	openMessage bool
	openModel   string
	openAgent   bool
	// What the prompt spent on the lost replica, as its run recorded it
	// (at its last retry): the taker goes on counting from there.
	spent, wasted Spend
	attempt       int
	calls         int // model calls the prompt made so far
	due           time.Time
	class         string
	source        string
}

// takeOver takes the lease of a running prompt whose owner was lost and
// resumes its retry, or ends it.
func (m *Manager) takeOver(ctx context.Context, id string) error {
	ok, _, err := m.leases.Acquire(ctx, id, m.leaseTTL())
	if err != nil || !ok {
		return err
	}
	release := func(err error) error {
		_ = m.leases.Release(context.WithoutCancel(ctx), id)
		return err
	}
	run, found, err := m.leases.LoadRun(ctx, id)
	if err == nil && !found {
		// It ended meanwhile.
		return m.leases.EndRun(ctx, id, PromptSlot{})
	}
	if err == nil && run.Ending {
		// Its replica was lost while the prompt ended (Finish freed the
		// prompt's slot): its prompt_end may not be stored.
		return m.endEnded(ctx, id, run)
	}
	var rec Record
	if err == nil {
		rec, found, err = m.store.Load(ctx, id)
		if err == nil && !found {
			// Deleted: nothing to end.
			return m.leases.EndRun(ctx, id, PromptSlot{})
		}
	}
	if err != nil {
		return release(err)
	}
	s := m.adopt(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || s.deleted || s.checking {
		return release(nil)
	}
	m.mu.RLock()
	closed := m.closed
	if !closed {
		m.runs.Add(1)
	}
	m.mu.RUnlock()
	if closed {
		return release(nil)
	}
	if err := s.syncLocked(ctx); err != nil {
		m.runs.Done()
		return release(err)
	}
	lostReplica := run.Replica
	var res *resumePoint
	s.runParams, s.thinkingOff = s.params, false
	if run.Params != nil {
		s.runParams = *run.Params
	}
	if run.Attempt > 0 && !run.Due.IsZero() {
		res = &resumePoint{attempt: run.Attempt, due: run.Due, class: run.Class, source: run.DelaySource, calls: run.Calls}
		s.chain.attempt, s.chain.open = run.Attempt, true
		run.Replica = m.bus.ReplicaID()
		if err := m.leases.SaveRun(ctx, id, run); err != nil {
			m.log.Warn("janitor: run not recorded", "session", id, "err", err)
		}
		// The resumed prompt goes on counting among its tenant's, whatever
		// their number now (a lost replica's slot expired with its lease; a
		// handed-over one is about to).
		if err := m.leases.Occupy(ctx, s.slot(run.PromptID), m.leaseTTL()); err != nil {
			m.log.Warn("janitor: the resumed prompt not counted among its tenant's", "session", id, "err", err)
		}
	} else {
		res = m.lostPoint(ctx, id, run, rec.LastSeq)
	}
	runCtx, cancel := context.WithCancel(m.baseCtx)
	s.running, s.promptID, s.cancelRun, s.abortCause, s.chain.stop = true, run.PromptID, cancel, stopNone, stopNone
	s.runDone = make(chan struct{})
	if res.lost {
		m.opts.Observer.Takeover(TakeoverEnded)
		m.log.Warn("janitor: the prompt's replica was lost: ending it", "session", id, "prompt", run.PromptID, "replica", lostReplica)
	} else {
		m.opts.Observer.Takeover(TakeoverResumed)
		m.log.Info("janitor: resuming the retry of a lost replica", "session", id, "prompt", run.PromptID,
			"replica", lostReplica, "attempt", run.Attempt, "due", run.Due)
	}
	if run.Spent != nil {
		res.spent = *run.Spent
	}
	if run.Wasted != nil {
		res.wasted = *run.Wasted
	}
	gen, promptID := s.generation, run.PromptID
	s.m.workers.start(func() { s.run(runCtx, cancel, gen, promptID, res) })
	return nil
}

// endEnded ends the run of a prompt whose replica was lost while it ended
// (the lease is this replica's): it stores the prompt's prompt_end, as its
// run records it, when the stored log lacks it, so that every prompt has
// exactly one. Then the run is over.
func (m *Manager) endEnded(ctx context.Context, id string, run Run) error {
	rec, found, err := m.store.Load(ctx, id)
	if err != nil {
		_ = m.leases.Release(context.WithoutCancel(ctx), id)
		return err
	}
	ended := true
	if found {
		if ended, err = m.promptEnded(ctx, id, run.PromptID, rec.LastSeq); err != nil {
			_ = m.leases.Release(context.WithoutCancel(ctx), id)
			return err
		}
	}
	if !ended {
		s := m.adopt(rec)
		s.mu.Lock()
		if err := s.syncLocked(ctx); err != nil {
			s.mu.Unlock()
			_ = m.leases.Release(context.WithoutCancel(ctx), id)
			return err
		}
		outcome, errText := run.Outcome, run.Error
		if outcome == "" {
			outcome, errText = OutcomeFailed, ErrOwnerLost
		}
		m.log.Warn("janitor: the prompt's replica was lost while it ended: storing its prompt_end", "session", id, "prompt", run.PromptID)
		s.emit(Event{Type: EventPromptEnd, PromptID: run.PromptID, Outcome: outcome, Error: errText})
		s.mu.Unlock()
		if err := m.events.Flush(ctx, id); err != nil {
			_ = m.leases.Release(context.WithoutCancel(ctx), id)
			return err
		}
	}
	return m.leases.EndRun(ctx, id, PromptSlot{})
}

// promptEnded reports whether the stored log's tail has promptID's
// prompt_end.
func (m *Manager) promptEnded(ctx context.Context, id, promptID string, lastSeq uint64) (bool, error) {
	const tail = 256
	evs, err := m.events.Events(ctx, id, max(lastSeq, tail)-tail, tail)
	if err != nil {
		return false, err
	}
	for _, e := range evs {
		if e.PromptID == promptID && e.Type == EventPromptEnd {
			return true, nil
		}
	}
	return false, nil
}

// lostPoint ends a lost replica's prompt: it reads the prompt's last stored
// events for what the replica left open (a message, a run).
func (m *Manager) lostPoint(ctx context.Context, id string, run Run, lastSeq uint64) *resumePoint {
	res := &resumePoint{lost: true, attempt: run.Attempt}
	const tail = 256
	evs, err := m.events.Events(ctx, id, max(lastSeq, tail)-tail, tail)
	if err != nil {
		m.log.Warn("janitor: the lost prompt's last events not read", "session", id, "err", err)
	}
	for _, e := range evs {
		if e.PromptID != run.PromptID {
			continue
		}
		switch e.Type {
		case EventMessageStart:
			res.openMessage, res.openModel = true, e.Model
		case EventMessageEnd:
			res.openMessage = false
		case EventAgentStart:
			res.openAgent = true
		case EventAgentEnd:
			res.openAgent = false
		}
	}
	return res
}

// resume goes on with a retry a lost replica had scheduled: the rest of its
// backoff, then the retry flow as usual.
func (s *Session) resume(ctx context.Context, gen uint64, promptID string, r *resumePoint) (outcome, errText string) {
	s.mu.Lock()
	cancel := make(chan struct{})
	s.chain.sleepCancel = cancel
	s.mu.Unlock()
	if cont, final, by := s.backoff(ctx, gen, promptID, r.attempt, r.class, r.source, max(r.due.Sub(s.m.opts.Now()), 0), cancel, "", r.calls); !cont {
		if ctx.Err() != nil || by != stopNone {
			return OutcomeAborted, final
		}
		return OutcomeFailed, final
	}
	return s.loop(ctx, gen, promptID, r.calls)
}

// closeOwnerLostLocked ends what a lost replica left open: its message (an
// error message_end), its run (agent_end), its retry chain, and tool calls
// that never got results.
func (s *Session) closeOwnerLostLocked(ctx context.Context, promptID string, res *resumePoint) {
	if res.openMessage {
		s.emit(Event{Type: EventMessageEnd, PromptID: promptID, Model: res.openModel, StopReason: provider.StopError,
			ErrorMessage: ErrOwnerLost})
	}
	if res.openAgent {
		s.emit(Event{Type: EventAgentEnd, PromptID: promptID})
	}
	if attempt := res.attempt; attempt > 0 {
		// The chain ended because its owner lost the session's lease.
		s.endChainLocked(promptID, chainEnd{outcome: ChainInterrupted, attempt: attempt, final: finalLeaseLost})
	}
	n := len(s.context)
	if n == 0 || s.context[n-1].Role != provider.RoleAssistant {
		return
	}
	calls := toolCallsOf(&s.context[n-1])
	if len(calls) == 0 {
		return
	}
	msg := provider.Message{Role: provider.RoleTool}
	for _, c := range calls {
		msg.Content = append(msg.Content, provider.Block{Type: provider.BlockToolResult, ToolCallID: c.CallID,
			ToolName: c.Name, Text: "not executed: " + ErrOwnerLost, IsError: true})
	}
	if err := s.appendContextLocked(ctx, promptID, msg); err != nil {
		// The history keeps the dangling calls; a later prompt closes them
		// (closeDanglingToolCallsLocked).
		s.m.log.Warn("results of a lost owner's tool calls not stored", "session", s.id, "err", err)
	}
}

// handOffLocked stops a run waiting in backoff so that another replica
// resumes it (a replica shutting down). It reports whether it did.
func (s *Session) handOffLocked() bool {
	if s.m.ownStore || !s.running || s.chain.sleepCancel == nil || s.ending {
		return false
	}
	s.handoff = true
	s.cancelRun()
	s.m.opts.Observer.Takeover(TakeoverHandedOff)
	return true
}

// handOver stores the run's last events and drops the lease, keeping the
// run record: another replica's janitor resumes the retry at its due time.
func (s *Session) handOver() {
	s.m.log.Info("retry handed over to the other replicas", "session", s.id)
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	if err := s.m.events.Flush(ctx, s.id); err != nil {
		s.m.log.Warn("events not stored", "session", s.id, "err", err)
	}
	s.releaseLease()
}
