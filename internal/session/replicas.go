package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// Sessions and their store. The store (Redis shared by replicas, or this
// process's own MemoryStore) is the source of truth, and every session
// runs one engine over it whichever it is; each replica keeps a working
// copy of the sessions it serves (this file: loading, adopting, evicting
// copies). Beside the session core, each part of replication in a file of
// its own, each using one part of the store (shared.go):
//
//   - lease.go: the replica running a session's prompt holds the
//     session's lease, taken with the run in one step when the prompt
//     starts, renewed while it runs, its retry scheduled in the stored run
//     and given back when it ends (Leases);
//   - fencing.go: a replica that lost the lease stops without a word, and
//     its readers learn where to resume;
//   - mirror.go: the owner publishes the session's events to its own log,
//     which queues them for the stored stream; every other replica with
//     readers of the session mirrors the stored stream into its own copy
//     of the log (EventStream);
//   - control.go: control calls reaching another replica are sent to the
//     lease holder (ControlBus);
//   - takeover.go: a janitor on every replica takes over the running
//     prompts whose lease expired: it resumes a retry that was waiting in
//     backoff, at its scheduled time, and ends any other prompt with "owner
//     replica lost".

// replicas implements replication (session.go).
type replicas struct{}

var _ replication = replicas{}

func (replicas) begin(ctx context.Context, s *Session, promptID string, user provider.Message) (*Subscription, error) {
	if err := s.acquireLocked(ctx, promptID, user); err != nil {
		return nil, err
	}
	sub, err := s.log.subscribe(s.log.lastSeq())
	if err != nil {
		s.abandonRun(promptID)
		return nil, err
	}
	return sub, nil
}

func (replicas) hold(s *Session, promptID string) (stop func()) { return s.keepLease(promptID) }

func (replicas) schedule(s *Session, r Run, stripped int64) {
	if r.Due.IsZero() {
		s.saveRunLocked(r)
		return
	}
	s.persistRetryLocked(r, stripped)
}

func (replicas) end(ctx context.Context, s *Session, promptID, outcome, errText string) {
	s.finishSharedLocked(ctx, promptID, outcome, errText)
}

func (replicas) release(ctx context.Context, s *Session, promptID string) {
	s.releaseAfterFlush(ctx, promptID)
}

func (replicas) idle(s *Session) { s.kickMirrorLocked() }

func (replicas) owner(ctx context.Context, s *Session) (string, error) { return s.remoteOwner(ctx) }

func (replicas) forward(ctx context.Context, s *Session, owner string, c Control) error {
	return s.control(ctx, owner, c)
}

func (replicas) subscribe(ctx context.Context, s *Session, after uint64) (*Subscription, error) {
	return s.subscribeShared(ctx, after)
}

// ErrUnavailable is a failure of the shared store, or of the replica that
// runs a session; the call can be retried.
var ErrUnavailable = errors.New("unavailable")

func unavailable(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
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
	m.bus.Serve(m.handleControl)
	m.events.WatchEvents(EventWatch{Stored: m.eventsStored, Lost: m.eventsLost})
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
	for name, own := range s.ownKeys {
		if own {
			mu.OwnKeys = append(mu.OwnKeys, name)
		}
	}
	slices.Sort(mu.OwnKeys)
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
	s.spent, s.sticky, s.ownKeys = Spend{}, maps.Clone(mu.Credentials), nil
	for _, name := range mu.OwnKeys {
		if s.ownKeys == nil {
			s.ownKeys = map[string]bool{}
		}
		s.ownKeys[name] = true
	}
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
	rec, found, err := m.store.Load(ctx, id)
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
		// The registry is the index of every session here: the copies
		// stay, but an idle one's events live in the store alone.
		m.releaseIdleLogs(idleLog)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sessionsPeak = max(m.sessionsPeak, len(m.sessions))
	defer func() { m.sessions = shrunk(m.sessions, &m.sessionsPeak) }()
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

// idleLog is how long a session of a process's own store keeps its log's
// copy of its events after its last use with nobody reading them.
const idleLog = 5 * time.Second

// releaseIdleLogs drops the log copies of the sessions that run nothing,
// have no readers and were not used for idle (eventLog.release).
func (m *Manager) releaseIdleLogs(idle time.Duration) {
	m.mu.RLock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.RUnlock()
	for _, s := range all {
		if !s.mu.TryLock() {
			continue
		}
		if !s.running && time.Since(s.lastUsed) >= idle {
			s.log.release()
		}
		s.mu.Unlock()
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
		m.sessions = shrunk(m.sessions, &m.sessionsPeak)
	}
	m.mu.Unlock()
	s.log.close()
}
