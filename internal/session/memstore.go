package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEventBuffer is the events a session's log keeps, in memory and in
// a MemoryStore, when Options.EventBuffer is not set.
const DefaultEventBuffer = 4096

// MemoryStore is an in-process session store shared by the replicas made
// from it (Replica): the same records, histories, event logs, leases with
// their epochs (fenced exactly as in Redis), runs, prompt slots and control
// calls as the Redis store, without a server. Time is time.Now's, so under
// testing/synctest leases expire on the bubble's clock: replica behaviour
// is testable without wall-clock waits. Events are stored at once (no
// writer queue): the watch hears of them before AppendEvent returns.
//
// It passes the same conformance suite as the Redis store.
type MemoryStore struct {
	mu       sync.Mutex
	sessions map[string]*memSession
	// sessionsPeak is the most sessions has held since it was last
	// copied smaller (shrunk).
	sessionsPeak  int
	order         uint64
	running       map[string]bool
	tenants       map[string]map[string]uint64 // tenant → session id → order
	slots         map[string]*promptSlots      // tenant → its prompts' slots
	replicas      map[string]*MemoryReplica
	followers     map[string]map[*MemoryReplica]func(removed bool)
	followersPeak int
	events        int // the events kept per session
}

type memSession struct {
	rec      Record
	mutable  Mutable
	history  []Entry
	stripped []int64
	events   []heldEvent // compact, as a log holds them
	lease    string
	leaseEnd time.Time
	epoch    uint64
	run      *Run
}

// NewMemoryStore returns an empty store keeping about eventBuffer events
// per session (<= 0: DefaultEventBuffer).
func NewMemoryStore(eventBuffer int) *MemoryStore {
	if eventBuffer <= 0 {
		eventBuffer = DefaultEventBuffer
	}
	return &MemoryStore{sessions: map[string]*memSession{}, running: map[string]bool{},
		tenants: map[string]map[string]uint64{}, slots: map[string]*promptSlots{},
		replicas: map[string]*MemoryReplica{}, followers: map[string]map[*MemoryReplica]func(bool){}, events: eventBuffer}
}

// MemoryReplica is one replica's view of a MemoryStore: a Shared.
type MemoryReplica struct {
	b  *MemoryStore
	id string
	// held is the epoch of each lease this replica took (0: lost since),
	// under the store's lock: the fence of its writes.
	held    map[string]uint64
	handler func(ctx context.Context, c Control) Reply
	watch   EventWatch
	closed  bool
	cut     atomic.Bool
}

var _ Shared = (*MemoryReplica)(nil)

// Replica returns the store of replica id ("" for a random id).
func (b *MemoryStore) Replica(id string) *MemoryReplica {
	if id == "" {
		id = newID("rep_")[:14]
	}
	m := &MemoryReplica{b: b, id: id, held: map[string]uint64{}}
	b.mu.Lock()
	b.replicas[id] = m
	b.mu.Unlock()
	return m
}

// errCut is the error of every call of a replica cut off from the store.
var errCut = errors.New("session store: memory: this replica is cut off from the store")

// Cut cuts the replica off from the store, as a network partition would:
// its calls fail (events are dropped) until Reconnect.
func (m *MemoryReplica) Cut() { m.cut.Store(true) }

// Reconnect ends a Cut.
func (m *MemoryReplica) Reconnect() { m.cut.Store(false) }

func (m *MemoryReplica) down() error {
	if m.cut.Load() {
		return errCut
	}
	return nil
}

// Close makes the replica unreachable (its control calls fail, as a dead
// replica's would); its store calls keep working.
func (m *MemoryReplica) Close() {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	m.closed = true
	delete(m.b.replicas, m.id)
	for _, fs := range m.b.followers {
		delete(fs, m)
	}
}

func (m *MemoryReplica) ReplicaID() string { return m.id }

// loseLocked marks the lease of id lost, when this replica took one.
func (m *MemoryReplica) loseLocked(id string) {
	if _, ok := m.held[id]; ok {
		m.held[id] = 0
	}
}

// fencedLocked reports whether this replica writes id under a lease it
// took (held), and whether such a write is refused: the lease is no longer
// that one.
func (m *MemoryReplica) fencedLocked(id string, s *memSession) (held, refused bool) {
	epoch, held := m.held[id]
	if !held {
		return false, false
	}
	return true, s == nil || !s.leaseHeldLocked(m.id) || s.epoch != epoch
}

func (s *memSession) leaseHeldLocked(replica string) bool {
	return s.lease == replica && time.Now().Before(s.leaseEnd)
}

func (s *memSession) holderLocked() string {
	if s.lease != "" && time.Now().Before(s.leaseEnd) {
		return s.lease
	}
	return ""
}

// write runs fn on id's session unless the write is fenced (ErrFenced).
func (m *MemoryReplica) write(id string, fn func(s *memSession)) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if _, refused := m.fencedLocked(id, s); refused {
		m.loseLocked(id)
		return fmt.Errorf("session store: write of %s: %w", id, ErrFenced)
	}
	if s != nil {
		fn(s)
	}
	return nil
}

func (b *MemoryStore) withRecord(s *memSession) Record {
	r := s.rec
	r.Mutable = s.mutable
	r.MessageCount = len(s.history)
	if n := len(s.events); n > 0 {
		r.LastSeq = s.events[n-1].seq
	}
	return r
}

func (m *MemoryReplica) Create(_ context.Context, r Record, max int) (CreateResult, error) {
	if err := m.down(); err != nil {
		return CreateResult{}, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	ts := b.tenants[r.Tenant]
	if ts == nil {
		ts = map[string]uint64{}
		b.tenants[r.Tenant] = ts
	}
	if max > 0 && len(ts) >= max {
		return CreateResult{Sessions: len(ts)}, nil
	}
	b.order++
	r.Order = b.order
	r.MessageCount, r.LastSeq = 0, 0
	b.sessions[r.ID] = &memSession{rec: r, mutable: r.Mutable}
	ts[r.ID] = r.Order
	return CreateResult{Created: true, Order: r.Order, Sessions: len(ts)}, nil
}

func (m *MemoryReplica) Load(_ context.Context, id string) (Record, bool, error) {
	if err := m.down(); err != nil {
		return Record{}, false, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		return Record{}, false, nil
	}
	return b.withRecord(s), true, nil
}

func (m *MemoryReplica) ListRecords(_ context.Context, tenant string, after uint64, limit int) ([]Record, error) {
	if err := m.down(); err != nil {
		return nil, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Record
	for id, order := range b.tenants[tenant] {
		if order > after {
			out = append(out, b.withRecord(b.sessions[id]))
		}
	}
	slices.SortFunc(out, func(x, y Record) int { return int(x.Order) - int(y.Order) })
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (m *MemoryReplica) Save(_ context.Context, id string, mu Mutable) error {
	if err := m.down(); err != nil {
		return err
	}
	return m.write(id, func(s *memSession) { s.mutable = mu })
}

func (m *MemoryReplica) Remove(_ context.Context, id, tenant string) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	b.mu.Lock()
	delete(m.held, id)
	delete(b.sessions, id)
	b.sessions = shrunk(b.sessions, &b.sessionsPeak)
	delete(b.running, id)
	if ts := b.tenants[tenant]; ts != nil {
		delete(ts, id)
		if len(ts) == 0 {
			// A tenant without sessions holds no map (nor its prompt
			// slots, once none is taken: a lost replica's still count).
			delete(b.tenants, tenant)
			if ps := b.slots[tenant]; ps != nil && len(ps.ends) == 0 {
				delete(b.slots, tenant)
			}
		}
	}
	var notify []func(bool)
	for _, f := range b.followers[id] {
		notify = append(notify, f)
	}
	delete(b.followers, id)
	b.followers = shrunk(b.followers, &b.followersPeak)
	b.mu.Unlock()
	for _, f := range notify {
		go f(true)
	}
	return nil
}

func (m *MemoryReplica) Append(_ context.Context, id string, e Entry) (int64, error) {
	if err := m.down(); err != nil {
		return 0, err
	}
	var idx int64 = -1
	err := m.write(id, func(s *memSession) {
		idx = int64(len(s.history))
		e.Index = idx
		s.history = append(s.history, e)
	})
	if err == nil && idx < 0 {
		// A removed session's write is dropped, as Redis lets it expire.
		idx = 0
	}
	return idx, err
}

func (m *MemoryReplica) List(_ context.Context, id string, offset, limit int) ([]Entry, int, error) {
	if err := m.down(); err != nil {
		return nil, 0, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		return nil, 0, nil
	}
	offset = max(offset, 0)
	if offset >= len(s.history) || limit <= 0 {
		return nil, len(s.history), nil
	}
	end := min(len(s.history), offset+limit)
	return slices.Clone(s.history[offset:end]), len(s.history), nil
}

func (m *MemoryReplica) Delete(_ context.Context, id string) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil {
		s.history, s.stripped = nil, nil
	}
	return nil
}

func (m *MemoryReplica) Strip(_ context.Context, id string, index int64) error {
	if err := m.down(); err != nil {
		return err
	}
	return m.write(id, func(s *memSession) {
		if !slices.Contains(s.stripped, index) {
			s.stripped = append(s.stripped, index)
		}
	})
}

func (m *MemoryReplica) Stripped(_ context.Context, id string) ([]int64, error) {
	if err := m.down(); err != nil {
		return nil, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		return nil, nil
	}
	out := slices.Clone(s.stripped)
	slices.Sort(out)
	return out, nil
}

// acquireLocked takes s's lease for ttl when no replica holds it.
func (m *MemoryReplica) acquireLocked(id string, s *memSession, ttl time.Duration) bool {
	if s.holderLocked() != "" {
		return false
	}
	s.lease, s.leaseEnd = m.id, time.Now().Add(ttl)
	s.epoch++
	m.held[id] = s.epoch
	return true
}

func (m *MemoryReplica) Acquire(_ context.Context, id string, ttl time.Duration) (bool, string, error) {
	if err := m.down(); err != nil {
		return false, "", err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		// Redis takes the lease of a record-less session (it expires);
		// nothing here outlives it.
		return true, m.id, nil
	}
	if !m.acquireLocked(id, s, ttl) {
		return false, s.holderLocked(), nil
	}
	return true, m.id, nil
}

func (m *MemoryReplica) Start(_ context.Context, id string, ttl time.Duration, r Run, first *Entry, slot PromptSlot, max int) (StartResult, error) {
	if err := m.down(); err != nil {
		return StartResult{}, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		return StartResult{}, nil
	}
	if h := s.holderLocked(); h != "" {
		return StartResult{Found: true, Holder: h}, nil
	}
	if slot.Tenant != "" {
		ps := b.liveSlotsLocked(slot.Tenant)
		if _, has := ps.ends[slot.PromptID]; max > 0 && len(ps.ends) >= max && !has {
			return StartResult{Found: true, Limited: true, Prompts: len(ps.ends)}, nil
		}
		ps.set(slot.PromptID, time.Now().Add(ttl))
	}
	m.acquireLocked(id, s, ttl)
	rec := b.withRecord(s)
	run := r
	s.run = &run
	b.running[id] = true
	if first != nil {
		e := *first
		e.Index = int64(len(s.history))
		s.history = append(s.history, e)
	}
	return StartResult{Found: true, Started: true, Holder: m.id, Record: rec, Epoch: s.epoch}, nil
}

// promptSlots are a tenant's prompt slots: each prompt's until its end or,
// when its replica stops renewing it, its expiry.
type promptSlots struct {
	ends map[string]time.Time // prompt id → expiry
	// sweep is a bound no slot expires before: the slots are looked
	// through for expired ones only once it has passed, not at every
	// prompt's start and renewal (the tenant's live prompts each time,
	// under the store's lock). Renewals only move expiries later, and a
	// sweep sets it to the earliest expiry it kept.
	sweep time.Time
}

func (ps *promptSlots) set(prompt string, end time.Time) {
	if len(ps.ends) == 0 || end.Before(ps.sweep) {
		ps.sweep = end
	}
	ps.ends[prompt] = end
}

// liveSlotsLocked drops tenant's expired prompt slots and returns the rest.
func (b *MemoryStore) liveSlotsLocked(tenant string) *promptSlots {
	ps := b.slots[tenant]
	if ps == nil {
		ps = &promptSlots{ends: map[string]time.Time{}}
		b.slots[tenant] = ps
	}
	now := time.Now()
	if len(ps.ends) == 0 || now.Before(ps.sweep) {
		return ps
	}
	var first time.Time
	for p, end := range ps.ends {
		switch {
		case !now.Before(end):
			delete(ps.ends, p)
		case first.IsZero() || end.Before(first):
			first = end
		}
	}
	ps.sweep = first
	return ps
}

func (m *MemoryReplica) Unappend(_ context.Context, id string, index int64) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil && int64(len(s.history)) == index+1 {
		s.history = s.history[:index]
	}
	return nil
}

func (m *MemoryReplica) Finish(_ context.Context, id string, mu Mutable, r Run, slot PromptSlot) error {
	if err := m.down(); err != nil {
		return err
	}
	err := m.write(id, func(s *memSession) {
		s.mutable = mu
		run := r
		s.run = &run
	})
	if err != nil {
		return err
	}
	m.freeSlot(slot)
	return nil
}

func (m *MemoryReplica) freeSlot(slot PromptSlot) {
	if slot.Tenant == "" {
		return
	}
	m.b.mu.Lock()
	if ps := m.b.slots[slot.Tenant]; ps != nil {
		// Kept empty for the tenant's next prompt (not made anew for
		// each): it goes with the tenant's last session (Remove).
		delete(ps.ends, slot.PromptID)
	}
	m.b.mu.Unlock()
}

// heldLocked reports whether this replica holds s's lease at the epoch it
// knows of (any epoch when it knows of none).
func (m *MemoryReplica) heldLocked(id string, s *memSession) bool {
	if s == nil || !s.leaseHeldLocked(m.id) {
		return false
	}
	epoch, ok := m.held[id]
	return !ok || epoch == s.epoch
}

func (m *MemoryReplica) Renew(_ context.Context, id string, ttl time.Duration, slot PromptSlot) (bool, error) {
	if err := m.down(); err != nil {
		return false, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if slot.Tenant != "" {
		b.liveSlotsLocked(slot.Tenant).set(slot.PromptID, time.Now().Add(ttl))
	}
	s := b.sessions[id]
	if !m.heldLocked(id, s) {
		m.loseLocked(id)
		return false, nil
	}
	s.leaseEnd = time.Now().Add(ttl)
	b.running[id] = true
	return true, nil
}

func (m *MemoryReplica) Occupy(_ context.Context, slot PromptSlot, ttl time.Duration) error {
	if err := m.down(); err != nil {
		return err
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	m.b.liveSlotsLocked(slot.Tenant).set(slot.PromptID, time.Now().Add(ttl))
	return nil
}

func (m *MemoryReplica) Release(_ context.Context, id string) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; m.heldLocked(id, s) {
		s.lease = ""
	}
	delete(m.held, id)
	return nil
}

func (m *MemoryReplica) Holder(_ context.Context, id string) (string, error) {
	if err := m.down(); err != nil {
		return "", err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil {
		return s.holderLocked(), nil
	}
	return "", nil
}

func (m *MemoryReplica) SaveRun(_ context.Context, id string, r Run) error {
	if err := m.down(); err != nil {
		return err
	}
	err := m.write(id, func(s *memSession) {
		run := r
		s.run = &run
		m.b.running[id] = true
	})
	return err
}

func (m *MemoryReplica) LoadRun(_ context.Context, id string) (Run, bool, error) {
	if err := m.down(); err != nil {
		return Run{}, false, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil && s.run != nil {
		return *s.run, true, nil
	}
	return Run{}, false, nil
}

func (m *MemoryReplica) EndRun(_ context.Context, id string, slot PromptSlot) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	b.mu.Lock()
	s := b.sessions[id]
	held := m.heldLocked(id, s)
	if held {
		s.run, s.lease = nil, ""
		delete(b.running, id)
	} else if s == nil {
		delete(b.running, id)
	}
	delete(m.held, id)
	b.mu.Unlock()
	if held {
		m.freeSlot(slot)
	}
	return nil
}

func (m *MemoryReplica) Running(_ context.Context) ([]string, error) {
	if err := m.down(); err != nil {
		return nil, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id := range b.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// AppendEvent implements Shared: the event is stored at once,
// fenced and checked against the stored stream as the Redis writer's
// script does, and the watch is told.
func (m *MemoryReplica) AppendEvent(id string, e Event) {
	m.appendEvent(id, e, nil, nil)
}

// appendEvent is AppendEvent of e, held as h when h is not nil (the
// session's log held it so: the two share what a whole event holds). With
// log not nil, the session's log is told the stored seq directly rather
// than through the watch, which would look the session up again.
func (m *MemoryReplica) appendEvent(id string, e Event, h *heldEvent, log *eventLog) {
	if e.SessionID == "" {
		e.SessionID = id
	}
	if h == nil || e.SessionID != id {
		held := holdEvent(id, &e)
		h = &held
	}
	m.appendHeld(id, h, log)
}

// appendHeld is appendEvent of the event h holds (its seq stamped), of
// session id.
func (m *MemoryReplica) appendHeld(id string, h *heldEvent, log *eventLog) {
	if m.down() != nil {
		return
	}
	b := m.b
	b.mu.Lock()
	s := b.sessions[id]
	var lostErr error
	var top uint64
	fenced, refused := m.fencedLocked(id, s)
	if refused {
		m.loseLocked(id)
		lostErr = ErrFenced
	}
	if s != nil && lostErr == nil {
		if n := len(s.events); n > 0 {
			top = s.events[n-1].seq
		}
		switch {
		case h.seq <= top:
			// Stored already.
		case fenced && h.seq != top+1:
			m.loseLocked(id)
			lostErr = fmt.Errorf("%w: the stored stream ends at seq %d, short of the events after it", ErrEventsLost, top)
		default:
			if s.events == nil {
				// A prompt has a few events at least: fewer regrowths.
				s.events = make([]heldEvent, 0, 8)
			}
			s.events = append(s.events, *h)
			// Trimmed by an eighth at a time (as XADD MAXLEN ~ trims
			// whole nodes): one copy per many events, not one per event.
			if over := len(s.events) - b.events; over > b.events/8 {
				s.events = slices.Delete(s.events, 0, over)
			}
			top = h.seq
		}
	}
	var notify []func(bool)
	if s != nil && lostErr == nil {
		for r, f := range b.followers[id] {
			if r != m {
				notify = append(notify, f)
			}
		}
	}
	w := m.watch
	b.mu.Unlock()
	switch {
	case lostErr != nil && w.Lost != nil:
		w.Lost(id, top, lostErr)
	case lostErr == nil && s != nil && log != nil:
		log.stored(top)
	case lostErr == nil && s != nil && w.Stored != nil:
		w.Stored(id, top)
	}
	for _, f := range notify {
		go f(false) // as pub/sub: never under the caller's locks
	}
}

// Flush implements Shared: events are stored as they come.
func (m *MemoryReplica) Flush(context.Context, string) error { return nil }

func (m *MemoryReplica) Events(_ context.Context, id string, after uint64, count int) ([]Event, error) {
	if err := m.down(); err != nil {
		return nil, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil || count <= 0 {
		return nil, nil
	}
	i, _ := slices.BinarySearchFunc(s.events, after+1, func(e heldEvent, seq uint64) int {
		return int(int64(e.seq) - int64(seq))
	})
	end := min(len(s.events), i+count)
	if i >= end {
		return nil, nil
	}
	out := make([]Event, end-i)
	for j := range out {
		out[j] = s.events[i+j].event(id)
	}
	return out, nil
}

func (m *MemoryReplica) Follow(id string, notify func(removed bool)) (stop func()) {
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.closed {
		return func() {}
	}
	if b.followers[id] == nil {
		b.followers[id] = map[*MemoryReplica]func(bool){}
	}
	b.followers[id][m] = notify
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if fs := b.followers[id]; fs != nil {
			delete(fs, m)
			if len(fs) == 0 {
				delete(b.followers, id)
				b.followers = shrunk(b.followers, &b.followersPeak)
			}
		}
	}
}

// Call implements Shared: the control message and its reply go
// through JSON, as between processes.
func (m *MemoryReplica) Call(ctx context.Context, replica string, c Control) (Reply, error) {
	if err := m.down(); err != nil {
		return Reply{}, err
	}
	m.b.mu.Lock()
	to := m.b.replicas[replica]
	var h func(context.Context, Control) Reply
	if to != nil {
		h = to.handler
	}
	m.b.mu.Unlock()
	if to == nil {
		return Reply{}, ErrNoReplica
	}
	if h == nil {
		return Reply{Err: ReplyOther, Msg: "replica not ready"}, nil
	}
	var in Control
	if err := roundTrip(c, &in); err != nil {
		return Reply{}, err
	}
	done := make(chan Reply, 1)
	go func() { done <- h(ctx, in) }()
	select {
	case rep := <-done:
		var out Reply
		err := roundTrip(rep, &out)
		return out, err
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	}
}

func roundTrip(v, out any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

func (m *MemoryReplica) Serve(h func(ctx context.Context, c Control) Reply) {
	m.b.mu.Lock()
	m.handler = h
	m.b.mu.Unlock()
}

func (m *MemoryReplica) WatchEvents(w EventWatch) {
	m.b.mu.Lock()
	m.watch = w
	m.b.mu.Unlock()
}
