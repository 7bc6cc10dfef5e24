package sessionstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/session"
)

// MemoryBackend is an in-process session store shared by the replicas made
// from it (Replica): the same records, histories, event logs, leases with
// their epochs (fenced exactly as in Redis), runs, prompt slots and control
// calls as the Redis store, without a server. Time is time.Now's, so under
// testing/synctest leases expire on the bubble's clock: replica behaviour
// is testable without wall-clock waits. Events are stored at once (no
// writer queue): the watch hears of them before AppendEvent returns.
//
// It passes the same conformance suite as the Redis store.
type MemoryBackend struct {
	mu        sync.Mutex
	sessions  map[string]*memSession
	order     uint64
	running   map[string]bool
	tenants   map[string]map[string]uint64    // tenant → session id → order
	slots     map[string]map[string]time.Time // tenant → prompt id → expiry
	replicas  map[string]*Memory
	followers map[string]map[*Memory]func(removed bool)
	events    int // the events kept per session
}

type memSession struct {
	rec      session.Record
	mutable  session.Mutable
	history  []session.Entry
	stripped []int64
	events   []session.Event
	lease    string
	leaseEnd time.Time
	epoch    uint64
	run      *session.Run
}

// NewMemoryBackend returns an empty store keeping about eventBuffer events
// per session (<= 0: DefaultEventBuffer).
func NewMemoryBackend(eventBuffer int) *MemoryBackend {
	if eventBuffer <= 0 {
		eventBuffer = DefaultEventBuffer
	}
	return &MemoryBackend{sessions: map[string]*memSession{}, running: map[string]bool{},
		tenants: map[string]map[string]uint64{}, slots: map[string]map[string]time.Time{},
		replicas: map[string]*Memory{}, followers: map[string]map[*Memory]func(bool){}, events: eventBuffer}
}

// Memory is one replica's view of a MemoryBackend: a session.Shared.
type Memory struct {
	b       *MemoryBackend
	id      string
	fences  fences
	handler func(ctx context.Context, c session.Control) session.Reply
	watch   session.EventWatch
	closed  bool
	cut     atomic.Bool
}

var _ session.Shared = (*Memory)(nil)

// Replica returns the store of replica id ("" for a random id).
func (b *MemoryBackend) Replica(id string) *Memory {
	if id == "" {
		id = newReplicaID()
	}
	m := &Memory{b: b, id: id}
	b.mu.Lock()
	b.replicas[id] = m
	b.mu.Unlock()
	return m
}

// errCut is the error of every call of a replica cut off from the store.
var errCut = errors.New("sessionstore: memory: this replica is cut off from the store")

// Cut cuts the replica off from the store, as a network partition would:
// its calls fail (events are dropped) until Reconnect.
func (m *Memory) Cut() { m.cut.Store(true) }

// Reconnect ends a Cut.
func (m *Memory) Reconnect() { m.cut.Store(false) }

func (m *Memory) down() error {
	if m.cut.Load() {
		return errCut
	}
	return nil
}

// Close makes the replica unreachable (its control calls fail, as a dead
// replica's would); its store calls keep working.
func (m *Memory) Close() {
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	m.closed = true
	delete(m.b.replicas, m.id)
	for _, fs := range m.b.followers {
		delete(fs, m)
	}
}

func (m *Memory) ReplicaID() string { return m.id }

// fencedLocked reports whether a write of id by this replica is refused:
// it holds a lease of id it knows of, and the lease is no longer that one.
func (m *Memory) fencedLocked(id string, s *memSession) bool {
	replica, epoch := m.fences.of(m.id, id)
	if replica == "" {
		return false
	}
	return s == nil || !s.leaseHeldLocked(replica) || fmt.Sprint(s.epoch) != epoch
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
func (m *Memory) write(id string, fn func(s *memSession)) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if m.fencedLocked(id, s) {
		m.fences.lose(id)
		return fmt.Errorf("sessionstore: write of %s: %w", id, session.ErrFenced)
	}
	if s != nil {
		fn(s)
	}
	return nil
}

func (b *MemoryBackend) withRecord(s *memSession) session.Record {
	r := s.rec
	r.Mutable = s.mutable
	r.MessageCount = len(s.history)
	if n := len(s.events); n > 0 {
		r.LastSeq = s.events[n-1].Seq
	}
	return r
}

func (m *Memory) Create(_ context.Context, r session.Record, max int) (session.CreateResult, error) {
	if err := m.down(); err != nil {
		return session.CreateResult{}, err
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
		return session.CreateResult{Sessions: len(ts)}, nil
	}
	b.order++
	r.Order = b.order
	r.MessageCount, r.LastSeq = 0, 0
	b.sessions[r.ID] = &memSession{rec: r, mutable: r.Mutable}
	ts[r.ID] = r.Order
	return session.CreateResult{Created: true, Order: r.Order, Sessions: len(ts)}, nil
}

func (m *Memory) Load(_ context.Context, id string) (session.Record, bool, error) {
	if err := m.down(); err != nil {
		return session.Record{}, false, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		return session.Record{}, false, nil
	}
	return b.withRecord(s), true, nil
}

func (m *Memory) ListRecords(_ context.Context, tenant string, after uint64, limit int) ([]session.Record, error) {
	if err := m.down(); err != nil {
		return nil, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []session.Record
	for id, order := range b.tenants[tenant] {
		if order > after {
			out = append(out, b.withRecord(b.sessions[id]))
		}
	}
	slices.SortFunc(out, func(x, y session.Record) int { return int(x.Order) - int(y.Order) })
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

func (m *Memory) Save(_ context.Context, id string, mu session.Mutable) error {
	if err := m.down(); err != nil {
		return err
	}
	return m.write(id, func(s *memSession) { s.mutable = mu })
}

func (m *Memory) Remove(_ context.Context, id, tenant string) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	m.fences.drop(id)
	b.mu.Lock()
	delete(b.sessions, id)
	delete(b.running, id)
	delete(b.tenants[tenant], id)
	var notify []func(bool)
	for _, f := range b.followers[id] {
		notify = append(notify, f)
	}
	delete(b.followers, id)
	b.mu.Unlock()
	for _, f := range notify {
		go f(true)
	}
	return nil
}

func (m *Memory) Append(_ context.Context, id string, e session.Entry) (int64, error) {
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

func (m *Memory) List(_ context.Context, id string, offset, limit int) ([]session.Entry, int, error) {
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

func (m *Memory) Delete(_ context.Context, id string) error {
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

func (m *Memory) Strip(_ context.Context, id string, index int64) error {
	if err := m.down(); err != nil {
		return err
	}
	return m.write(id, func(s *memSession) {
		if !slices.Contains(s.stripped, index) {
			s.stripped = append(s.stripped, index)
		}
	})
}

func (m *Memory) Stripped(_ context.Context, id string) ([]int64, error) {
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
func (m *Memory) acquireLocked(id string, s *memSession, ttl time.Duration) bool {
	if s.holderLocked() != "" {
		return false
	}
	s.lease, s.leaseEnd = m.id, time.Now().Add(ttl)
	s.epoch++
	m.fences.hold(id, int64(s.epoch))
	return true
}

func (m *Memory) Acquire(_ context.Context, id string, ttl time.Duration) (bool, string, error) {
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

func (m *Memory) Start(_ context.Context, id string, ttl time.Duration, r session.Run, first *session.Entry, slot session.PromptSlot, max int) (session.StartResult, error) {
	if err := m.down(); err != nil {
		return session.StartResult{}, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[id]
	if s == nil {
		return session.StartResult{}, nil
	}
	if h := s.holderLocked(); h != "" {
		return session.StartResult{Found: true, Holder: h}, nil
	}
	if slot.Tenant != "" {
		n := b.liveSlotsLocked(slot.Tenant)
		if _, has := b.slots[slot.Tenant][slot.PromptID]; max > 0 && n >= max && !has {
			return session.StartResult{Found: true, Limited: true, Prompts: n}, nil
		}
		b.slots[slot.Tenant][slot.PromptID] = time.Now().Add(ttl)
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
	return session.StartResult{Found: true, Started: true, Holder: m.id, Record: rec, Epoch: s.epoch}, nil
}

// liveSlotsLocked drops tenant's expired prompt slots and counts the rest.
func (b *MemoryBackend) liveSlotsLocked(tenant string) int {
	ps := b.slots[tenant]
	if ps == nil {
		ps = map[string]time.Time{}
		b.slots[tenant] = ps
	}
	now := time.Now()
	for p, end := range ps {
		if !now.Before(end) {
			delete(ps, p)
		}
	}
	return len(ps)
}

func (m *Memory) Unappend(_ context.Context, id string, index int64) error {
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

func (m *Memory) Finish(_ context.Context, id string, mu session.Mutable, r session.Run, slot session.PromptSlot) error {
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

func (m *Memory) freeSlot(slot session.PromptSlot) {
	if slot.Tenant == "" {
		return
	}
	m.b.mu.Lock()
	delete(m.b.slots[slot.Tenant], slot.PromptID)
	m.b.mu.Unlock()
}

// heldLocked reports whether this replica holds s's lease at the epoch it
// knows of (any epoch when it knows of none).
func (m *Memory) heldLocked(id string, s *memSession) bool {
	if s == nil || !s.leaseHeldLocked(m.id) {
		return false
	}
	_, epoch := m.fences.of(m.id, id)
	return epoch == "" || epoch == fmt.Sprint(s.epoch)
}

func (m *Memory) Renew(_ context.Context, id string, ttl time.Duration, slot session.PromptSlot) (bool, error) {
	if err := m.down(); err != nil {
		return false, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if slot.Tenant != "" {
		b.liveSlotsLocked(slot.Tenant)
		b.slots[slot.Tenant][slot.PromptID] = time.Now().Add(ttl)
	}
	s := b.sessions[id]
	if !m.heldLocked(id, s) {
		m.fences.lose(id)
		return false, nil
	}
	s.leaseEnd = time.Now().Add(ttl)
	return true, nil
}

func (m *Memory) Occupy(_ context.Context, slot session.PromptSlot, ttl time.Duration) error {
	if err := m.down(); err != nil {
		return err
	}
	m.b.mu.Lock()
	defer m.b.mu.Unlock()
	m.b.liveSlotsLocked(slot.Tenant)
	m.b.slots[slot.Tenant][slot.PromptID] = time.Now().Add(ttl)
	return nil
}

func (m *Memory) Release(_ context.Context, id string) error {
	if err := m.down(); err != nil {
		return err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; m.heldLocked(id, s) {
		s.lease = ""
	}
	m.fences.drop(id)
	return nil
}

func (m *Memory) Holder(_ context.Context, id string) (string, error) {
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

func (m *Memory) SaveRun(_ context.Context, id string, r session.Run) error {
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

func (m *Memory) LoadRun(_ context.Context, id string) (session.Run, bool, error) {
	if err := m.down(); err != nil {
		return session.Run{}, false, err
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil && s.run != nil {
		return *s.run, true, nil
	}
	return session.Run{}, false, nil
}

func (m *Memory) EndRun(_ context.Context, id string, slot session.PromptSlot) error {
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
	m.fences.drop(id)
	b.mu.Unlock()
	if held {
		m.freeSlot(slot)
	}
	return nil
}

func (m *Memory) Running(_ context.Context) ([]string, error) {
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

// AppendEvent implements session.Shared: the event is stored at once,
// fenced and checked against the stored stream as the Redis writer's
// script does, and the watch is told.
func (m *Memory) AppendEvent(id string, e session.Event) {
	if m.down() != nil {
		return
	}
	if e.SessionID == "" {
		e.SessionID = id
	}
	b := m.b
	b.mu.Lock()
	s := b.sessions[id]
	var lostErr error
	var top uint64
	if m.fencedLocked(id, s) {
		m.fences.lose(id)
		lostErr = session.ErrFenced
	}
	if s != nil && lostErr == nil {
		if n := len(s.events); n > 0 {
			top = s.events[n-1].Seq
		}
		replica, _ := m.fences.of(m.id, id)
		switch {
		case e.Seq <= top:
			// Stored already.
		case replica != "" && e.Seq != top+1:
			m.fences.lose(id)
			lostErr = fmt.Errorf("%w: the stored stream ends at seq %d, short of the events after it", session.ErrEventsLost, top)
		default:
			s.events = append(s.events, e)
			if over := len(s.events) - b.events; over > 0 {
				s.events = slices.Delete(s.events, 0, over)
			}
			top = e.Seq
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
	case lostErr == nil && s != nil && w.Stored != nil:
		w.Stored(id, top)
	}
	for _, f := range notify {
		go f(false) // as pub/sub: never under the caller's locks
	}
}

// Flush implements session.Shared: events are stored as they come.
func (m *Memory) Flush(context.Context, string) error { return nil }

func (m *Memory) Events(_ context.Context, id string, after uint64, count int) ([]session.Event, error) {
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
	i, _ := slices.BinarySearchFunc(s.events, after+1, func(e session.Event, seq uint64) int {
		return int(int64(e.Seq) - int64(seq))
	})
	end := min(len(s.events), i+count)
	return slices.Clone(s.events[i:end]), nil
}

func (m *Memory) Follow(id string, notify func(removed bool)) (stop func()) {
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.closed {
		return func() {}
	}
	if b.followers[id] == nil {
		b.followers[id] = map[*Memory]func(bool){}
	}
	b.followers[id][m] = notify
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.followers[id], m)
	}
}

// Call implements session.Shared: the control message and its reply go
// through JSON, as between processes.
func (m *Memory) Call(ctx context.Context, replica string, c session.Control) (session.Reply, error) {
	if err := m.down(); err != nil {
		return session.Reply{}, err
	}
	m.b.mu.Lock()
	to := m.b.replicas[replica]
	var h func(context.Context, session.Control) session.Reply
	if to != nil {
		h = to.handler
	}
	m.b.mu.Unlock()
	if to == nil {
		return session.Reply{}, session.ErrNoReplica
	}
	if h == nil {
		return session.Reply{Err: session.ReplyOther, Msg: "replica not ready"}, nil
	}
	var in session.Control
	if err := roundTrip(c, &in); err != nil {
		return session.Reply{}, err
	}
	done := make(chan session.Reply, 1)
	go func() { done <- h(ctx, in) }()
	select {
	case rep := <-done:
		var out session.Reply
		err := roundTrip(rep, &out)
		return out, err
	case <-ctx.Done():
		return session.Reply{}, ctx.Err()
	}
}

func roundTrip(v, out any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

func (m *Memory) Serve(h func(ctx context.Context, c session.Control) session.Reply) {
	m.b.mu.Lock()
	m.handler = h
	m.b.mu.Unlock()
}

func (m *Memory) WatchEvents(w session.EventWatch) {
	m.b.mu.Lock()
	m.watch = w
	m.b.mu.Unlock()
}
