package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// Sessions across replicas. With a shared store, the store is the source
// of truth and each replica keeps a working copy of the sessions it serves:
//
//   - the replica running a session's prompt holds the session's lease
//     (renewed while the prompt runs); it reloads the record, and the
//     history when another replica wrote to it since, when it takes the
//     lease, and writes the record back when the prompt ends;
//   - it publishes the session's events to its own log, which queues them
//     for the stored stream; every other replica with readers of the
//     session mirrors the stored stream into its own copy of the log;
//   - control calls reaching another replica are sent to the lease holder;
//   - a janitor on every replica takes over the running prompts whose
//     lease expired: it resumes a retry that was waiting in backoff, at its
//     scheduled time, and ends any other prompt with "owner replica lost".

// DefaultLeaseTTL is the lease of a running prompt on its session.
const DefaultLeaseTTL = 10 * time.Second

// ErrUnavailable is a failure of the shared store, or of the replica that
// runs a session; the call can be retried.
var ErrUnavailable = errors.New("unavailable")

// ErrOwnerLost ends a prompt whose replica was lost.
const ErrOwnerLost = "owner replica lost"

// How often a replica with readers of a session it does not run checks the
// stored log even without a notification (one can be lost while the pub/sub
// connection reconnects): often while a prompt is under way (its last
// event seen here is not a prompt_end), rarely when the session is idle (a
// new prompt's next notification catches up anyway).
const (
	mirrorPoll     = 2 * time.Second
	mirrorIdlePoll = 30 * time.Second
)

func unavailable(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
}

func (m *Manager) leaseTTL() time.Duration {
	if m.opts.LeaseTTL > 0 {
		return m.opts.LeaseTTL
	}
	return DefaultLeaseTTL
}

// newLog is a session's event log, gated: it delivers only what the store
// holds.
func (m *Manager) newLog(id string) *eventLog {
	l := newEventLog(id, m.opts.EventBuffer, m.opts.Now, m.opts.Observer.SubscriberDropped)
	l.gated = true
	return l
}

// startShared starts the control handler, the event watch and the janitor.
func (m *Manager) startShared() {
	m.opts.Shared.Serve(m.handleControl)
	m.opts.Shared.WatchEvents(EventWatch{Stored: m.eventsStored, Lost: m.eventsLost})
	m.bg.Add(2)
	go func() {
		defer m.bg.Done()
		m.janitor()
	}()
	go func() {
		defer m.bg.Done()
		m.pollMirrors()
	}()
}

// recordOf is the stored form of a new session.
func recordOf(s *Session) Record {
	return Record{ID: s.id, Tenant: s.tenant, Role: s.role, System: s.system, Primary: s.primary,
		Tools: s.tools, Params: s.params, Created: s.created, Mutable: s.mutableLocked()}
}

func (s *Session) mutableLocked() Mutable {
	mu := Mutable{Model: s.model, Settings: s.settings, Spent: &Spend{}, Credentials: maps.Clone(s.sticky)}
	*mu.Spent = s.spent
	if s.warmModel != "" {
		mu.Warm = &WarmCache{Model: s.warmModel, Account: s.warmAccount}
	}
	if fb := s.fallback; fb != nil {
		mu.Fallback = &FallbackState{Role: fb.role, Original: fb.original, Pinned: fb.pinned}
	}
	return mu
}

func (s *Session) setMutableLocked(mu Mutable) {
	s.model, s.settings, s.fallback = mu.Model, mu.Settings, nil
	s.spent, s.sticky = Spend{}, maps.Clone(mu.Credentials)
	if mu.Spent != nil {
		s.spent = *mu.Spent
	}
	s.warmModel, s.warmAccount = "", ""
	if w := mu.Warm; w != nil {
		s.warmModel, s.warmAccount = w.Model, w.Account
	}
	if fb := mu.Fallback; fb != nil {
		s.fallback = &activeFallback{role: fb.Role, original: fb.Original, pinned: fb.Pinned}
	}
}

// lookupShared returns the working copy of a stored session.
func (m *Manager) lookupShared(ctx context.Context, tenant, id string) (*Session, error) {
	m.mu.RLock()
	s, ok := m.sessions[id]
	m.mu.RUnlock()
	if ok && s.tenant == tenant && s.runsHere() {
		return s, nil
	}
	rec, found, err := m.opts.Shared.Load(ctx, id)
	if err != nil {
		return nil, unavailable("load session", err)
	}
	if !found || rec.Tenant != tenant {
		if !found && ok {
			m.forget(s)
		}
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return m.adopt(rec), nil
}

// adopt returns this replica's copy of a stored session, refreshed from rec
// unless its prompt runs here.
func (m *Manager) adopt(rec Record) *Session {
	m.mu.Lock()
	s, ok := m.sessions[rec.ID]
	if !ok {
		s = &Session{
			m: m, id: rec.ID, tenant: rec.Tenant, created: rec.Created, order: rec.Order,
			role: rec.Role, system: rec.System, tools: rec.Tools, primary: rec.Primary, params: rec.Params,
			ctxEntries: -1,
			log:        m.newLog(rec.ID),
		}
		m.sessions[rec.ID] = s
	}
	m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		s.setMutableLocked(rec.Mutable)
		s.entries = rec.MessageCount
	}
	s.storedSeq = max(s.storedSeq, rec.LastSeq)
	s.lastUsed = time.Now()
	return s
}

// idleCopy is how long this replica keeps its copy of a session nobody
// used since (it reloads it from the store on the next call).
const idleCopy = 10 * time.Minute

// evictIdle drops the copies of sessions that run nothing here, have no
// readers here and were not used for idleCopy.
func (m *Manager) evictIdle() {
	if m.ownStore {
		// The registry is the index of every session here: nothing to
		// reload a dropped copy from would be cheaper than keeping it.
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, s := range m.sessions {
		// The session's lock is taken before the manager's everywhere
		// else: a busy one is skipped instead of waited for.
		if !s.mu.TryLock() {
			continue
		}
		idle := !s.running && !s.following && !s.pulling && s.log.subscribers() == 0 && time.Since(s.lastUsed) > idleCopy
		s.mu.Unlock()
		if idle {
			delete(m.sessions, id)
			s.log.close()
		}
	}
}

// register makes s this replica's copy of its session again (a prompt
// starting on a copy evicted meanwhile): control calls find the run.
func (m *Manager) register(s *Session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessions[s.id] = s
}

// forget drops this replica's copy of a session that no longer exists.
func (m *Manager) forget(s *Session) {
	m.mu.Lock()
	if m.sessions[s.id] == s {
		delete(m.sessions, s.id)
	}
	m.mu.Unlock()
	s.log.close()
}

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
	sh := s.m.opts.Shared
	if sh == nil || s.runsHere() {
		return "", nil
	}
	holder, err := sh.Holder(ctx, s.id)
	if err != nil {
		return "", unavailable("read the session's lease", err)
	}
	if holder == sh.ReplicaID() {
		return "", nil
	}
	return holder, nil
}

// control sends c to owner and maps its reply onto the session API's errors.
func (s *Session) control(ctx context.Context, owner string, c Control) error {
	c.SessionID = s.id
	rep, err := s.m.opts.Shared.Call(ctx, owner, c)
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
	rep, err := s.m.opts.Shared.Call(cctx, owner, Control{Op: OpState, SessionID: s.id})
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

func (s *Session) setAutoRetryShared(ctx context.Context, enabled bool) error {
	owner, err := s.remoteOwner(ctx)
	if err != nil {
		return err
	}
	if owner != "" {
		// The owner writes its settings back when its prompt ends.
		return s.control(ctx, owner, Control{Op: OpSetAutoRetry, Enabled: enabled})
	}
	s.mu.Lock()
	s.settings.Enabled = enabled
	mu, running := s.mutableLocked(), s.running
	s.mu.Unlock()
	if running {
		return nil
	}
	if err := s.m.opts.Shared.Save(ctx, s.id, mu); err != nil {
		return unavailable("save the session", err)
	}
	return nil
}

// acquireLocked takes the session's lease for a prompt, records the run,
// counts the prompt among its tenant's and brings the working copy up to
// date with the store: one round trip (Shared.Start) when the session is
// free.
func (s *Session) acquireLocked(ctx context.Context, promptID string, user provider.Message) error {
	first := &Entry{Time: s.m.opts.Now(), PromptID: promptID, Message: user}
	pick := s.firstPickLocked()
	res, picked, err := s.tryStart(ctx, Run{PromptID: promptID, Replica: s.m.opts.Shared.ReplicaID()}, first, pick)
	switch {
	case err != nil:
		return unavailable("take the session's lease", err)
	case res.Limited:
		return promptsLimitError(res.Prompts)
	case !res.Found:
		// Deleted on another replica since this copy was loaded.
		s.m.forget(s)
		return fmt.Errorf("%w: %s", ErrNotFound, s.id)
	case !res.Started:
		return fmt.Errorf("%w: a prompt is running on replica %s (wait for its prompt_end or Abort it)", ErrBusy, res.Holder)
	}
	// The user message, stored by Start at the end of the history it read.
	idx := int64(res.Record.MessageCount)
	if err := s.applyLocked(ctx, res.Record); err != nil {
		// The prompt does not start: nor does its message stay.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.m.leaseTTL())
		if uerr := s.m.opts.Shared.Unappend(uctx, s.id, idx); uerr != nil {
			s.m.log.Error("the user message of a prompt that could not start stays in the history", "session", s.id, "err", uerr)
		}
		cancel()
		s.abandonRun(promptID)
		return err
	}
	s.entries = res.Record.MessageCount + 1
	s.context = append(s.context, user)
	s.ctxIndex = append(s.ctxIndex, idx)
	if picked.OK && pick.Provider == s.m.providerOf(s.model).Name {
		// The first call's credential, picked in the start's round trip.
		s.credential = picked.Credential
		s.switchedTo.provider, s.switchedTo.cred = pick.Provider, picked.Credential
	}
	s.m.register(s)
	return nil
}

// firstPickLocked is the credential pick of the prompt's first call, as
// callModelOnce would make it, for a store that makes it in the start's
// round trip (StartPicker); zero when there is none to make.
func (s *Session) firstPickLocked() CredentialPick {
	if _, ok := s.m.opts.Shared.(StartPicker); !ok || s.m.opts.Credentials == nil {
		return CredentialPick{}
	}
	p := s.m.providerOf(s.model)
	pick := CredentialPick{Tenant: s.tenant, Provider: p.Name}
	if !p.RotateCredentials {
		pick.Prefer = s.sticky[p.Name]
	}
	return pick
}

// tryStart starts the run (Shared.Start). A lease whose run is ending (its
// prompt_end is going out, the holder is about to release it), or is not
// recorded yet, is waited for briefly.
func (s *Session) tryStart(ctx context.Context, run Run, first *Entry, pick CredentialPick) (StartResult, Picked, error) {
	sh := s.m.opts.Shared
	sp, _ := sh.(StartPicker)
	ttl := s.m.leaseTTL()
	wait := time.Millisecond
	deadline := time.Now().Add(2 * time.Second)
	slot := PromptSlot{Tenant: s.tenant, PromptID: run.PromptID}
	limit := s.m.opts.Limits.MaxConcurrentPromptsPerTenant
	for {
		var res StartResult
		var picked Picked
		var err error
		if sp != nil && pick.Provider != "" {
			res, picked, err = sp.StartPick(ctx, s.id, ttl, run, first, slot, limit, pick)
		} else {
			res, err = sh.Start(ctx, s.id, ttl, run, first, slot, limit)
		}
		if err != nil || res.Started || !res.Found || res.Limited {
			return res, picked, err
		}
		// No run recorded: the run ended between the two calls, a prompt is
		// starting and has not recorded its run yet, or a janitor is
		// looking at an ended run. Either way the answer comes soon.
		held, found, err := sh.LoadRun(ctx, s.id)
		if err != nil || (found && !held.Ending) || time.Now().After(deadline) {
			return res, Picked{}, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, Picked{}, nil
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func (s *Session) releaseLease() {
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	if err := s.m.opts.Shared.Release(ctx, s.id); err != nil {
		s.m.log.Warn("session lease not released (it expires on its own)", "session", s.id, "err", err)
	}
}

// syncLocked reloads the record, rebuilds the runtime context when the
// history changed since this replica last had it, and moves the log on to
// the newest stored event.
func (s *Session) syncLocked(ctx context.Context) error {
	rec, found, err := s.m.opts.Shared.Load(ctx, s.id)
	if err != nil {
		return unavailable("load session", err)
	}
	if !found {
		return fmt.Errorf("%w: %s", ErrNotFound, s.id)
	}
	return s.applyLocked(ctx, rec)
}

// applyLocked brings the working copy up to rec, as syncLocked does.
func (s *Session) applyLocked(ctx context.Context, rec Record) error {
	sh := s.m.opts.Shared
	s.setMutableLocked(rec.Mutable)
	if s.ctxEntries != rec.MessageCount {
		// Up to the record's count: Start may have appended the prompt's
		// user message after it read the count.
		entries, _, err := sh.List(ctx, s.id, 0, rec.MessageCount)
		if err != nil {
			return unavailable("load history", err)
		}
		stripped, err := sh.Stripped(ctx, s.id)
		if err != nil {
			return unavailable("load history", err)
		}
		s.context, s.ctxIndex = s.context[:0], s.ctxIndex[:0]
		for _, e := range entries {
			if e.ModelChange != nil || e.Message.Role == RoleModelChange || slices.Contains(stripped, e.Index) {
				continue
			}
			s.context = append(s.context, e.Message)
			s.ctxIndex = append(s.ctxIndex, e.Index)
		}
		s.entries = rec.MessageCount
		s.ctxEntries = rec.MessageCount
	}
	s.storedSeq = max(s.storedSeq, rec.LastSeq)
	if s.log.lastSeq() < rec.LastSeq {
		if s.log.subscribers() > 0 {
			if err := s.pull(ctx); err != nil {
				return unavailable("read events", err)
			}
		}
		s.log.jump(rec.LastSeq + 1)
	}
	return nil
}

// keepLease renews the lease, and the prompt's slot among its tenant's,
// while the run lasts; stop ends it (and waits for a renewal under way). A
// lease lost to another replica aborts the run. Renewals run on a timer's
// goroutine, so a prompt shorter than a third of the lease costs no
// goroutine of its own.
func (s *Session) keepLease(promptID string) (stop func()) {
	k := &leaseKeeper{s: s, slot: s.slot(promptID), ttl: s.m.leaseTTL(), renewed: time.Now()}
	k.mu.Lock()
	k.t = time.AfterFunc(k.ttl/3, k.renew)
	k.mu.Unlock()
	return k.stop
}

// leaseKeeper is keepLease's renewal timer.
type leaseKeeper struct {
	s       *Session
	slot    PromptSlot
	ttl     time.Duration
	renewed time.Time // the last renewal (only renew touches it)

	mu      sync.Mutex
	t       *time.Timer
	stopped bool
	running sync.WaitGroup
}

func (k *leaseKeeper) renew() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.running.Add(1)
	k.mu.Unlock()
	defer k.running.Done()
	s := k.s
	ctx, cancel := context.WithTimeout(context.Background(), k.ttl/3)
	ok, err := s.m.opts.Shared.Renew(ctx, s.id, k.ttl, k.slot)
	cancel()
	switch {
	case err != nil && time.Since(k.renewed) < k.ttl:
		s.m.log.Warn("session lease not renewed", "session", s.id, "err", err)
	case err != nil:
		// Cut off from the store for a whole lease: another replica takes
		// the prompt over, so this one stops it.
		s.mu.Lock()
		s.fenceLocked(0, fmt.Errorf("the lease expired while the store was unreachable: %w", err))
		s.mu.Unlock()
		return
	case ok:
		k.renewed = time.Now()
	default:
		s.mu.Lock()
		s.fenceLocked(0, ErrFenced)
		s.mu.Unlock()
		return
	}
	k.mu.Lock()
	if !k.stopped {
		k.t.Reset(k.ttl / 3)
	}
	k.mu.Unlock()
}

func (k *leaseKeeper) stop() {
	k.mu.Lock()
	k.stopped = true
	k.t.Stop()
	k.mu.Unlock()
	k.running.Wait()
}

// finishSharedLocked writes the session back, marks the run as ending and
// frees the prompt's slot, before prompt_end goes out: a replica sent a
// prompt by a client that saw prompt_end waits for the lease instead of
// refusing it, and the tenant's count no longer has this prompt.
func (s *Session) finishSharedLocked(ctx context.Context, promptID, outcome, errText string) {
	sh := s.m.opts.Shared
	if err := sh.Finish(ctx, s.id, s.mutableLocked(), Run{PromptID: promptID, Replica: sh.ReplicaID(), Ending: true,
		Outcome: outcome, Error: errText}, s.slot(promptID)); err != nil {
		s.m.log.Error("session not saved, or its run not marked as ending", "session", s.id, "err", err)
		s.fenceOnLocked(err)
	}
	s.ctxEntries = s.entries
}

// slot is the place of the session's prompt among its tenant's.
func (s *Session) slot(promptID string) PromptSlot {
	return PromptSlot{Tenant: s.tenant, PromptID: promptID}
}

// abandonRun drops the run record, the lease and the slot of a prompt that
// could not start.
func (s *Session) abandonRun(promptID string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	if err := s.m.opts.Shared.EndRun(ctx, s.id, s.slot(promptID)); err != nil {
		s.m.log.Warn("run not ended in the store (its lease expires on its own)", "session", s.id, "err", err)
	}
}

// releaseAfterFlush stores the run's last events, then ends the run record
// and drops the lease (and the slot, should Finish have missed it).
func (s *Session) releaseAfterFlush(ctx context.Context, promptID string) {
	if err := s.m.opts.Shared.Flush(ctx, s.id); err != nil {
		// Its prompt_end may never be stored: the run stays (ending), for
		// the replica that takes it over to store it.
		s.m.log.Warn("the prompt's last events not stored: another replica ends the prompt", "session", s.id, "err", err)
		s.mu.Lock()
		s.fenceLocked(0, err)
		s.mu.Unlock()
		s.releaseLease()
		return
	}
	if err := s.m.opts.Shared.EndRun(ctx, s.id, s.slot(promptID)); err != nil {
		s.m.log.Warn("run not ended in the store (its lease expires on its own)", "session", s.id, "err", err)
	}
}

// saveRunLocked records the run's retry state (due zero: not in backoff).
func (s *Session) saveRunLocked(r Run) {
	sh := s.m.opts.Shared
	if sh == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	r.Replica = sh.ReplicaID()
	r.Spent, r.Wasted = s.runSpendLocked()
	if err := sh.SaveRun(ctx, s.id, r); err != nil {
		s.m.log.Warn("run state not stored (another replica could not resume this retry)", "session", s.id, "err", err)
		s.fenceOnLocked(err)
	}
}

// persistRetryLocked stores a scheduled retry: the failed message stripped
// from the runtime context (index stripped, -1 for none), the session's
// model and fallback state, and the run's retry state.
func (s *Session) persistRetryLocked(r Run, stripped int64) {
	sh := s.m.opts.Shared
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	if stripped >= 0 {
		if err := sh.Strip(ctx, s.id, stripped); err != nil {
			s.m.log.Warn("stripped message not recorded", "session", s.id, "err", err)
			s.fenceOnLocked(err)
		}
	}
	if err := sh.Save(ctx, s.id, s.mutableLocked()); err != nil {
		s.m.log.Warn("session not saved", "session", s.id, "err", err)
		s.fenceOnLocked(err)
	}
	r.Replica = sh.ReplicaID()
	r.Params = s.promptParamsLocked()
	r.Spent, r.Wasted = s.runSpendLocked()
	if err := sh.SaveRun(ctx, s.id, r); err != nil {
		s.m.log.Warn("run state not stored (another replica could not resume this retry)", "session", s.id, "err", err)
		s.fenceOnLocked(err)
	}
}

// runSpendLocked is what the running prompt spent so far, for its run
// record (nil when nothing).
func (s *Session) runSpendLocked() (spent, wasted *Spend) {
	if sp := s.runSpent; !sp.Usage.IsZero() || sp.Priced {
		spent = &sp
	}
	if w := s.runWasted; !w.Usage.IsZero() || w.Priced {
		wasted = &w
	}
	return spent, wasted
}

// promptParamsLocked is the running prompt's model parameters for its run
// record: nil when they are the session's.
func (s *Session) promptParamsLocked() *provider.Params {
	if reflect.DeepEqual(s.runParams, s.params) {
		return nil
	}
	p := s.runParams
	return &p
}

// subscribeShared brings this replica's copy of the log up to date, fills in
// older events when the reader wants them, and keeps the copy fed.
func (s *Session) subscribeShared(ctx context.Context, after uint64) (*Subscription, error) {
	s.mu.Lock()
	running, stored := s.running, s.storedSeq
	s.mu.Unlock()
	// stored is the newest seq the store held when the session was last
	// looked up (Get, just before): the copy pulls only when it is behind.
	if !running && s.log.lastSeq() < stored {
		if s.log.lastSeq() == 0 && after > 0 && after <= stored {
			// A first reader from the middle: no need for what came before.
			s.log.jump(after + 1)
		}
		if err := s.pull(ctx); err != nil {
			return nil, unavailable("read events", err)
		}
	}
	if oldest := s.log.oldest(); after+1 < oldest {
		n := min(oldest-1-after, uint64(s.m.opts.EventBuffer))
		evs, err := s.m.opts.Shared.Events(ctx, s.id, oldest-1-n, int(n))
		if err != nil {
			return nil, unavailable("read events", err)
		}
		s.log.prepend(evs)
	}
	sub, err := s.log.subscribe(after)
	if err != nil {
		return nil, err
	}
	s.startMirror()
	return sub, nil
}

// pull applies the stored events after the copy's newest one.
func (s *Session) pull(ctx context.Context) error {
	s.pullMu.Lock()
	defer s.pullMu.Unlock()
	const batch = 512
	for {
		evs, err := s.m.opts.Shared.Events(ctx, s.id, s.log.lastSeq(), batch)
		if err != nil {
			return err
		}
		s.log.apply(evs)
		if len(evs) < batch {
			return nil
		}
	}
}

// startMirror makes this replica's copy of the log follow the stored one
// while it has readers: no goroutine of its own while nothing happens. A
// notification (events stored by another replica) starts a pull, the
// manager's poller pulls in case one was lost (every mirrorPoll while a
// prompt is under way, every mirrorIdlePoll otherwise) and stops following
// once the last reader left.
func (s *Session) startMirror() {
	s.mu.Lock()
	if s.following {
		s.mu.Unlock()
		return
	}
	s.following = true
	s.lastPull = time.Now()
	s.mu.Unlock()
	stop := s.m.opts.Shared.Follow(s.id, s.notified)
	s.mu.Lock()
	if s.following {
		s.stopFollow = stop
		stop = nil
	}
	s.mu.Unlock()
	if stop != nil {
		// Removed meanwhile.
		stop()
		return
	}
	s.m.mu.Lock()
	s.m.followed[s] = struct{}{}
	s.m.mu.Unlock()
}

// notified is the store's notification: events stored by another replica,
// or the session removed by one.
func (s *Session) notified(removed bool) {
	if !removed {
		s.mu.Lock()
		s.pullLocked()
		s.mu.Unlock()
		return
	}
	go func() {
		s.stopFollowing(nil)
		s.m.forget(s)
	}()
}

// pullLocked starts a pull into the copy of the log, or has the one under
// way go round again: not while the prompt runs here (the log is the
// store's source then).
func (s *Session) pullLocked() {
	if !s.following || s.running {
		return
	}
	if s.pulling {
		s.pullAgain = true
		return
	}
	// Counted under the manager's lock: Close, which waits for the
	// pulls, either sees this one or it does not start.
	s.m.mu.RLock()
	closed := s.m.closed
	if !closed {
		s.m.bg.Add(1)
	}
	s.m.mu.RUnlock()
	if closed {
		return
	}
	s.pulling = true
	go func() {
		defer s.m.bg.Done()
		for {
			ctx, cancel := context.WithTimeout(s.m.baseCtx, s.m.leaseTTL())
			if err := s.pull(ctx); err != nil && s.m.baseCtx.Err() == nil {
				s.m.log.Warn("events of another replica not read", "session", s.id, "err", err)
			}
			cancel()
			s.mu.Lock()
			s.lastPull = time.Now()
			if !s.pullAgain || s.running || s.m.baseCtx.Err() != nil {
				s.pulling, s.pullAgain = false, false
				s.mu.Unlock()
				return
			}
			s.pullAgain = false
			s.mu.Unlock()
		}
	}()
}

// stopFollowing ends the copy's following of the stored log, when only is
// nil or is its stop function.
func (s *Session) stopFollowing(only func()) {
	s.mu.Lock()
	stop := s.stopFollow
	s.following, s.stopFollow = false, nil
	s.mu.Unlock()
	s.m.mu.Lock()
	delete(s.m.followed, s)
	s.m.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// pollMirrors is the manager's poller of the copies that follow a stored
// log: it pulls what a lost notification would have announced, and stops
// following for copies without readers.
func (m *Manager) pollMirrors() {
	t := time.NewTicker(mirrorPoll)
	defer t.Stop()
	var ss []*Session
	for {
		select {
		case <-m.baseCtx.Done():
			return
		case <-t.C:
		}
		ss = ss[:0]
		m.mu.RLock()
		for s := range m.followed {
			ss = append(ss, s)
		}
		m.mu.RUnlock()
		for _, s := range ss {
			s.mu.Lock()
			switch {
			case !s.following || s.stopFollow == nil:
				// Starting, or stopped.
			case s.log.subscribers() == 0:
				s.mu.Unlock()
				s.stopFollowing(nil)
				continue
			case s.log.lastType() != EventPromptEnd || time.Since(s.lastPull) >= mirrorIdlePoll:
				s.pullLocked()
			}
			s.mu.Unlock()
		}
	}
}

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
	sh := m.opts.Shared
	ids, err := sh.Running(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("janitor: running sessions not listed", "err", err)
		}
		return
	}
	for _, id := range ids {
		holder, err := sh.Holder(ctx, id)
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
	sh := m.opts.Shared
	ok, _, err := sh.Acquire(ctx, id, m.leaseTTL())
	if err != nil || !ok {
		return err
	}
	release := func(err error) error {
		_ = sh.Release(context.WithoutCancel(ctx), id)
		return err
	}
	run, found, err := sh.LoadRun(ctx, id)
	if err == nil && !found {
		// It ended meanwhile.
		return sh.EndRun(ctx, id, PromptSlot{})
	}
	if err == nil && run.Ending {
		// Its replica was lost while the prompt ended (Finish freed the
		// prompt's slot): its prompt_end may not be stored.
		return m.endEnded(ctx, id, run)
	}
	var rec Record
	if err == nil {
		rec, found, err = sh.Load(ctx, id)
		if err == nil && !found {
			// Deleted: nothing to end.
			return sh.EndRun(ctx, id, PromptSlot{})
		}
	}
	if err != nil {
		return release(err)
	}
	s := m.adopt(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || s.deleted {
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
		s.retryAttempt, s.gateOpen = run.Attempt, true
		run.Replica = sh.ReplicaID()
		if err := sh.SaveRun(ctx, id, run); err != nil {
			m.log.Warn("janitor: run not recorded", "session", id, "err", err)
		}
		// The resumed prompt goes on counting among its tenant's, whatever
		// their number now (a lost replica's slot expired with its lease; a
		// handed-over one is about to).
		if err := sh.Occupy(ctx, s.slot(run.PromptID), m.leaseTTL()); err != nil {
			m.log.Warn("janitor: the resumed prompt not counted among its tenant's", "session", id, "err", err)
		}
	} else {
		res = m.lostPoint(ctx, id, run, rec.LastSeq)
	}
	runCtx, cancel := context.WithCancel(m.baseCtx)
	s.running, s.promptID, s.cancelRun, s.abortCause, s.chainStop = true, run.PromptID, cancel, stopNone, stopNone
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
	go s.run(runCtx, cancel, s.generation, run.PromptID, res)
	return nil
}

// endEnded ends the run of a prompt whose replica was lost while it ended
// (the lease is this replica's): it stores the prompt's prompt_end, as its
// run records it, when the stored log lacks it, so that every prompt has
// exactly one. Then the run is over.
func (m *Manager) endEnded(ctx context.Context, id string, run Run) error {
	sh := m.opts.Shared
	rec, found, err := sh.Load(ctx, id)
	if err != nil {
		_ = sh.Release(context.WithoutCancel(ctx), id)
		return err
	}
	ended := true
	if found {
		if ended, err = m.promptEnded(ctx, id, run.PromptID, rec.LastSeq); err != nil {
			_ = sh.Release(context.WithoutCancel(ctx), id)
			return err
		}
	}
	if !ended {
		s := m.adopt(rec)
		s.mu.Lock()
		if err := s.syncLocked(ctx); err != nil {
			s.mu.Unlock()
			_ = sh.Release(context.WithoutCancel(ctx), id)
			return err
		}
		outcome, errText := run.Outcome, run.Error
		if outcome == "" {
			outcome, errText = OutcomeFailed, ErrOwnerLost
		}
		m.log.Warn("janitor: the prompt's replica was lost while it ended: storing its prompt_end", "session", id, "prompt", run.PromptID)
		s.emit(Event{Type: EventPromptEnd, PromptID: run.PromptID, Outcome: outcome, Error: errText})
		s.mu.Unlock()
		if err := sh.Flush(ctx, id); err != nil {
			_ = sh.Release(context.WithoutCancel(ctx), id)
			return err
		}
	}
	return sh.EndRun(ctx, id, PromptSlot{})
}

// promptEnded reports whether the stored log's tail has promptID's
// prompt_end.
func (m *Manager) promptEnded(ctx context.Context, id, promptID string, lastSeq uint64) (bool, error) {
	const tail = 256
	evs, err := m.opts.Shared.Events(ctx, id, max(lastSeq, tail)-tail, tail)
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
	evs, err := m.opts.Shared.Events(ctx, id, max(lastSeq, tail)-tail, tail)
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
	s.sleepCancel = cancel
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
	s.appendContextLocked(ctx, promptID, msg)
}

// handOffLocked stops a run waiting in backoff so that another replica
// resumes it (a replica shutting down). It reports whether it did.
func (s *Session) handOffLocked() bool {
	if s.m.ownStore || !s.running || s.sleepCancel == nil || s.ending {
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
	if err := s.m.opts.Shared.Flush(ctx, s.id); err != nil {
		s.m.log.Warn("events not stored", "session", s.id, "err", err)
	}
	s.releaseLease()
}

// kickMirrorLocked pulls into a following copy after a prompt of this
// replica's ended: notifications that came while it ran were skipped.
func (s *Session) kickMirrorLocked() {
	s.pullLocked()
}
