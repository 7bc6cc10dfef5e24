package session

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// A prompt's hold on its session: the lease taken when it starts (with
// its run, its place among its tenant's prompts and the user message, in
// one step of the store), renewed while it runs, its retry scheduled in
// the stored run, and given back when it ends (Leases).

// DefaultLeaseTTL is the lease of a running prompt on its session.
const DefaultLeaseTTL = 10 * time.Second

func (m *Manager) leaseTTL() time.Duration {
	if m.opts.LeaseTTL > 0 {
		return m.opts.LeaseTTL
	}
	return DefaultLeaseTTL
}

// acquireLocked takes the session's lease for a prompt, records the run,
// counts the prompt among its tenant's and brings the working copy up to
// date with the store: one round trip (Shared.Start) when the session is
// free.
func (s *Session) acquireLocked(ctx context.Context, promptID string, user provider.Message) error {
	first := &Entry{Time: s.m.opts.Now(), PromptID: promptID, Message: user}
	pick := s.firstPickLocked()
	res, picked, err := s.tryStart(ctx, Run{PromptID: promptID, Replica: s.m.bus.ReplicaID()}, first, pick)
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
	err = s.applyLocked(ctx, res.Record)
	if err == nil {
		// Counted over the history as the store holds it, which the
		// start brought this copy up to.
		err = s.historyFullLocked()
	}
	if err != nil {
		// The prompt does not start: nor does its message stay.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.m.leaseTTL())
		if uerr := s.m.leases.Unappend(uctx, s.id, idx); uerr != nil {
			s.m.log.Error("the user message of a prompt that could not start stays in the history", "session", s.id, "err", uerr)
		}
		cancel()
		s.abandonRun(promptID)
		return err
	}
	s.entries = res.Record.MessageCount + 1
	s.histBytes += entrySize(*first)
	s.context = append(s.context, user)
	s.ctxIndex = append(s.ctxIndex, idx)
	if (picked.OK || picked.None) && pick.Provider == s.m.providerOf(s.model).Name {
		// The first call's credential, picked in the start's round trip
		// (none: the provider has none, and the call goes without one).
		s.credential = picked.Credential
		s.switchedTo = pickedCred{provider: pick.Provider, cred: picked.Credential, none: picked.None}
	}
	s.m.register(s)
	return nil
}

// firstPickLocked is the credential pick of the prompt's first call, as
// callModelOnce would make it, for a store that makes it in the start's
// round trip (StartPicker); zero when there is none to make.
func (s *Session) firstPickLocked() CredentialPick {
	if _, ok := s.m.leases.(StartPicker); !ok || s.m.opts.Credentials == nil {
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
	sp, _ := s.m.leases.(StartPicker)
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
			res, err = s.m.leases.Start(ctx, s.id, ttl, run, first, slot, limit)
		}
		if err != nil || res.Started || !res.Found || res.Limited {
			return res, picked, err
		}
		// No run recorded: the run ended between the two calls, a prompt is
		// starting and has not recorded its run yet, or a janitor is
		// looking at an ended run. Either way the answer comes soon.
		held, found, err := s.m.leases.LoadRun(ctx, s.id)
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
	if err := s.m.leases.Release(ctx, s.id); err != nil {
		s.m.log.Warn("session lease not released (it expires on its own)", "session", s.id, "err", err)
	}
}

// syncLocked reloads the record, rebuilds the runtime context when the
// history changed since this replica last had it, and moves the log on to
// the newest stored event.
func (s *Session) syncLocked(ctx context.Context) error {
	rec, found, err := s.m.store.Load(ctx, s.id)
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
	s.setMutableLocked(rec.Mutable)
	if s.ctxEntries != rec.MessageCount {
		// Up to the record's count: Start may have appended the prompt's
		// user message after it read the count.
		entries, _, err := s.m.store.List(ctx, s.id, 0, rec.MessageCount)
		if err != nil {
			return unavailable("load history", err)
		}
		stripped, err := s.m.store.Stripped(ctx, s.id)
		if err != nil {
			return unavailable("load history", err)
		}
		s.context, s.ctxIndex = s.context[:0], s.ctxIndex[:0]
		s.histBytes = 0
		for _, e := range entries {
			s.histBytes += entrySize(e)
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
	ok, err := s.m.leases.Renew(ctx, s.id, k.ttl, k.slot)
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
	if err := s.m.leases.Finish(ctx, s.id, s.mutableLocked(), Run{PromptID: promptID, Replica: s.m.bus.ReplicaID(), Ending: true,
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
	if err := s.m.leases.EndRun(ctx, s.id, s.slot(promptID)); err != nil {
		s.m.log.Warn("run not ended in the store (its lease expires on its own)", "session", s.id, "err", err)
	}
}

// releaseAfterFlush stores the run's last events, then ends the run record
// and drops the lease (and the slot, should Finish have missed it).
func (s *Session) releaseAfterFlush(ctx context.Context, promptID string) {
	if err := s.m.events.Flush(ctx, s.id); err != nil {
		// Its prompt_end may never be stored: the run stays (ending), for
		// the replica that takes it over to store it.
		s.m.log.Warn("the prompt's last events not stored: another replica ends the prompt", "session", s.id, "err", err)
		s.mu.Lock()
		s.fenceLocked(0, err)
		s.mu.Unlock()
		s.releaseLease()
		return
	}
	if err := s.m.leases.EndRun(ctx, s.id, s.slot(promptID)); err != nil {
		s.m.log.Warn("run not ended in the store (its lease expires on its own)", "session", s.id, "err", err)
	}
}

// saveRunLocked records the run's retry state (due zero: not in backoff).
func (s *Session) saveRunLocked(r Run) {
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	r.Replica = s.m.bus.ReplicaID()
	r.Spent, r.Wasted = s.runSpendLocked()
	if err := s.m.leases.SaveRun(ctx, s.id, r); err != nil {
		s.m.log.Warn("run state not stored (another replica could not resume this retry)", "session", s.id, "err", err)
		s.fenceOnLocked(err)
	}
}

// persistRetryLocked stores a scheduled retry: the failed message stripped
// from the runtime context (index stripped, -1 for none), the session's
// model and fallback state, and the run's retry state.
func (s *Session) persistRetryLocked(r Run, stripped int64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	if stripped >= 0 {
		if err := s.m.store.Strip(ctx, s.id, stripped); err != nil {
			s.m.log.Warn("stripped message not recorded", "session", s.id, "err", err)
			s.fenceOnLocked(err)
		}
	}
	if err := s.m.store.Save(ctx, s.id, s.mutableLocked()); err != nil {
		s.m.log.Warn("session not saved", "session", s.id, "err", err)
		s.fenceOnLocked(err)
	}
	r.Replica = s.m.bus.ReplicaID()
	r.Params = s.promptParamsLocked()
	r.Spent, r.Wasted = s.runSpendLocked()
	if err := s.m.leases.SaveRun(ctx, s.id, r); err != nil {
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
