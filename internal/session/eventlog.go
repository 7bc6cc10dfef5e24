package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrEventsDropped is returned to a reader that asks for, or fell behind to,
// events the log no longer holds. The reader can resume from the oldest seq
// still held (see *DroppedError).
var ErrEventsDropped = errors.New("events dropped")

// ErrLogClosed ends a subscription whose session was deleted or whose server
// is shutting down, after every event before that has been delivered.
var ErrLogClosed = errors.New("event log closed")

// DroppedError says which events are gone.
type DroppedError struct {
	After  uint64 // the reader wanted events after this seq
	Oldest uint64 // the oldest seq still held
}

func (e *DroppedError) Error() string {
	return fmt.Sprintf("events %d..%d were dropped (the session keeps the most recent ones); resume after seq %d or later",
		e.After+1, e.Oldest-1, e.Oldest-1)
}

// Is makes errors.Is(err, ErrEventsDropped) true.
func (e *DroppedError) Is(target error) bool { return target == ErrEventsDropped }

// ErrResume ends the readers of a replica that lost a session's lease
// while its prompt ran: the stored log, which every replica serves, goes on
// from another replica. The reader resumes after the seq *ResumeError names,
// on any replica.
var ErrResume = errors.New("resume elsewhere")

// ResumeError says where to resume: after seq After, the newest event the
// store holds of what this replica delivered. A reader that got events
// beyond it (a failover lost them from the store) drops them.
type ResumeError struct {
	After uint64
}

func (e *ResumeError) Error() string {
	return fmt.Sprintf("session lease lost: this replica no longer runs the prompt (another replica goes on with it); resume after seq %d, on any replica", e.After)
}

// Is makes errors.Is(err, ErrResume) true.
func (e *ResumeError) Is(target error) bool { return target == ErrResume }

// eventLog is a session's bounded, ordered event log. Publishing never
// blocks: readers keep their own cursor and are woken by a broadcast
// channel, so a slow reader costs the session nothing. A reader whose next
// event has been overwritten gets a *DroppedError and can resume by seq.
type eventLog struct {
	sessionID string
	now       func() time.Time
	onDrop    func() // a reader fell behind and was cut off

	mu sync.Mutex
	// ring[(seq-base) % size] holds seq. It grows as events come, up to
	// size: an idle session costs no buffer. base is 1 unless the log was
	// moved forward (jump) or filled from older stored events (prepend), as
	// a replica's copy of a shared session's log is. Events are held
	// compact (heldEvent).
	ring    []heldEvent
	ringBox *[]heldEvent // what held ring in ringBufs (nil: none yet)
	size    uint64
	base    uint64
	next    uint64 // the seq the next event gets
	// waiting are the readers waiting for an event: each is woken on its
	// own channel, made once per reader, so that a wait costs no channel
	// (an event closing one shared channel would cost a new one per wait,
	// one per chunk for a reader keeping up with a stream).
	waiting []*Subscription
	closed  bool
	subs    int

	// A session's log delivers only what the store holds (gated; an
	// ungated log is the unit tests'): readers see events up to durable, which the store's writer
	// moves on as it stores them; events of other replicas (apply) are
	// stored already. So no reader sees an event the stored log may not
	// have. fenced: the replica lost the lease of the running prompt; the
	// log takes no new events (publish drops them) until unfence, and the
	// readers of an earlier epoch (those subscribed before a fence) end
	// with a *ResumeError once they have read up to the fence's point
	// (fencedSince), whatever the log took after it.
	gated   bool
	durable uint64
	fenced  bool
	epoch   uint64
	fences  []fencePoint // the latest fences, oldest first
	floor   uint64       // the lowest point of the fences dropped from fences (none: ^0)
}

// fencePoint is a fence: the epoch it began, and the seq its readers
// resume after.
type fencePoint struct{ epoch, at uint64 }

// keptFences bounds a log's record of its fences: a reader older than
// them all resumes after the lowest point of any (floor).
const keptFences = 8

// fencedSinceLocked is where a reader subscribed in epoch resumes: the
// lowest point of the fences since (^0 when none came).
func (l *eventLog) fencedSinceLocked(epoch uint64) uint64 {
	at := ^uint64(0)
	if len(l.fences) > 0 && epoch < l.fences[0].epoch-1 {
		at = l.floor
	}
	for _, f := range l.fences {
		if f.epoch > epoch {
			at = min(at, f.at)
		}
	}
	return at
}

func newEventLog(sessionID string, size int, now func() time.Time, onDrop func()) *eventLog {
	if onDrop == nil {
		onDrop = func() {}
	}
	return &eventLog{sessionID: sessionID, now: now, onDrop: onDrop, size: uint64(size), base: 1, next: 1, floor: ^uint64(0)}
}

// publish stamps e with the next seq and the time, stores it and, unless
// the log is gated, wakes readers. It returns the stamped event, and the
// event as the log holds it (for the in-process store to hold it the
// same).
func (l *eventLog) publish(e Event) (Event, heldEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return e, heldEvent{}
	}
	if l.fenced {
		return Event{}, heldEvent{} // Seq 0: not stored either
	}
	e.SessionID = l.sessionID
	e.Seq = l.next
	e.Time = l.now()
	h := holdEvent(l.sessionID, &e)
	l.addLocked(h)
	return e, h
}

// publishHeld is publish of the event h holds in its own fields (a delta:
// h.full nil), without an Event made of it: it stamps h with the next seq
// and the time, and returns the seq (0: the log is closed or fenced, and h
// is not stored).
func (l *eventLog) publishHeld(h *heldEvent) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.fenced {
		return 0
	}
	h.seq, h.time = l.next, l.now()
	l.addLocked(*h)
	return h.seq
}

// addLocked stores h, stamped with the next seq, and wakes readers unless
// the log is gated: a gated log's readers can read it once it is stored,
// and stored wakes them then (woken now, they would find nothing to read).
func (l *eventLog) addLocked(h heldEvent) {
	l.storeLocked(h)
	if !l.gated {
		l.wakeLocked()
	}
}

// stored moves the delivered part of a gated log on to seq (the store
// holds every event up to it).
func (l *eventLog) stored(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq > l.durable && !l.fenced {
		l.durable = min(seq, l.next-1)
		l.wakeLocked()
	}
}

// fence stops the log taking events of this replica: those after at (the
// newest the store holds of them; 0: the newest it confirmed) are dropped,
// the readers subscribed so far end with a *ResumeError after at, and
// publish drops events until unfence. It returns at.
func (l *eventLog) fence(at uint64) uint64 { return l.fenceAt(at, at == 0) }

// fenceAt is fence at seq at, 0 included (the store holds none of what
// the log delivered), or at the newest confirmed seq when confirmed is
// true; at most there.
func (l *eventLog) fenceAt(at uint64, confirmed bool) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if confirmed || at > l.durable {
		at = l.durable
	}
	if at < l.next-1 {
		var keep []heldEvent
		for seq := l.oldestLocked(); seq <= at; seq++ {
			keep = append(keep, l.ring[(seq-l.base)%l.size])
		}
		if len(keep) == 0 {
			l.jumpLocked(at + 1)
		} else {
			l.ring, l.base, l.next = keep, keep[0].seq, at+1
		}
	}
	l.durable = at
	l.fenced = true
	l.epoch++
	if len(l.fences) == keptFences {
		l.floor = min(l.floor, l.fences[0].at)
		l.fences = append(l.fences[:0], l.fences[1:]...)
	}
	l.fences = append(l.fences, fencePoint{epoch: l.epoch, at: at})
	l.wakeLocked()
	return at
}

// suspend stops the log taking events, as fence does, while the point to
// fence it at is not known yet: its readers read what was delivered
// and then wait, until fence names the point and ends them.
func (l *eventLog) suspend() {
	l.mu.Lock()
	l.fenced = true
	l.mu.Unlock()
}

// eventMark is what tells one event from another at the same seq: a log's
// copy of an event against the store's after a failover that lost events
// and took others in their place.
type eventMark struct {
	seq      uint64
	typ      string
	promptID string
	time     time.Time
	text     string
}

func (h *heldEvent) mark() eventMark {
	if e := h.full; e != nil {
		return eventMark{seq: e.Seq, typ: e.Type, promptID: e.PromptID, time: e.Time, text: e.TextDelta}
	}
	return eventMark{seq: h.seq, typ: h.typ, promptID: h.promptID, time: h.time, text: h.text}
}

// is reports whether e is the event m marks.
func (m eventMark) is(e *Event) bool {
	return e.Seq == m.seq && e.Type == m.typ && e.PromptID == m.promptID && e.Time.Equal(m.time) && e.TextDelta == m.text
}

// delivered are the marks of the held events that readers may have read,
// oldest first, and the newest seq they may have read.
func (l *eventLog) delivered() (ms []eventMark, upTo uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	upTo = l.visibleLocked()
	for seq := l.oldestLocked(); seq <= upTo; seq++ {
		ms = append(ms, l.ring[(seq-l.base)%l.size].mark())
	}
	return ms, upTo
}

// newest is the mark of the newest held event; ok is false when the log
// holds none. own is true when the log holds events the store has not
// confirmed yet: this replica's own, on their way to the store (a prompt
// runs here, or its last events are being stored), so that the log is the
// stored log's source for now, not a copy of it.
func (l *eventLog) newest() (m eventMark, ok, own bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gated && l.durable < l.next-1 {
		return eventMark{}, false, true
	}
	if l.next == l.oldestLocked() {
		return eventMark{}, false, false
	}
	return l.ring[(l.next-1-l.base)%l.size].mark(), true, false
}

// taking reports whether the log takes events: not closed, nor fenced.
func (l *eventLog) taking() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.closed && !l.fenced
}

// unfence lets the log take events again.
func (l *eventLog) unfence() {
	l.mu.Lock()
	l.fenced = false
	l.mu.Unlock()
}

// visibleLocked is the newest seq readers may read.
func (l *eventLog) visibleLocked() uint64 {
	if l.gated {
		return l.durable
	}
	return l.next - 1
}

// storeLocked stores e, whose seq is next.
func (l *eventLog) storeLocked(e heldEvent) {
	switch {
	case uint64(len(l.ring)) == l.size:
		l.ring[(e.seq-l.base)%l.size] = e
	case len(l.ring) == cap(l.ring):
		// Full below size (or none yet: a prompt has a few events at
		// least): the next array of ringBufs, the events moved over and
		// the old array given back.
		grown, box := takeRing(min(max(2*uint64(cap(l.ring)), ringMin), l.size))
		grown = append(grown, l.ring...)
		giveRing(l.ring, l.ringBox)
		l.ring, l.ringBox = append(grown, e), box
	default:
		l.ring = append(l.ring, e)
	}
	l.next = e.seq + 1
}

// ringBufs are the logs' ring arrays, by size class (ringMin, twice that,
// …): a log that lets its copy of its events go (release) gives its array
// back, cleared, and a log takes its arrays from here as its events come,
// so that a session prompted now and then does not allocate its log anew
// each prompt (about twice its events' size, growing from ringMin).
var ringBufs [ringClasses]sync.Pool

const (
	ringMin     = 8
	ringClasses = 14 // up to 64Ki events; a larger log's array is its own
)

// ringClass is the class of an array of capacity n: -1 unless n is one of
// the classes' sizes.
func ringClass(n uint64) int {
	for c, size := 0, uint64(ringMin); c < ringClasses; c, size = c+1, size*2 {
		if n == size {
			return c
		}
	}
	return -1
}

// takeRing is an empty array for at least n events: a class's, from its
// pool or new, or (beyond the classes) one of exactly n. box is what held
// it in the pool (nil for a new array), for giveRing to put it back in.
func takeRing(n uint64) (_ []heldEvent, box *[]heldEvent) {
	c, size := 0, uint64(ringMin)
	for ; c < ringClasses && size < n; c, size = c+1, size*2 {
	}
	if c == ringClasses {
		return make([]heldEvent, 0, n), nil
	}
	if p, ok := ringBufs[c].Get().(*[]heldEvent); ok {
		r := (*p)[:0]
		*p = nil // the box holds nothing while the log has the array
		return r, p
	}
	return make([]heldEvent, 0, size), nil
}

// giveRing clears r (it holds no event's strings for the garbage collector
// to keep) and gives it back to its class's pool in box (a new one when
// nil); an array of no class is left to the collector.
func giveRing(r []heldEvent, box *[]heldEvent) {
	c := ringClass(uint64(cap(r)))
	if c < 0 {
		return
	}
	r = r[:cap(r)]
	clear(r)
	if box == nil {
		box = new([]heldEvent)
	}
	*box = r[:0]
	ringBufs[c].Put(box)
}

func (l *eventLog) wakeLocked() {
	for i, s := range l.waiting {
		s.waitAt = 0
		select {
		case s.wake <- struct{}{}:
		default: // woken already
		}
		l.waiting[i] = nil
	}
	l.waiting = l.waiting[:0]
}

// unwaitLocked takes s off the waiting readers (a wait that ended
// otherwise: its context, its Close), and drops a wake-up sent to it
// meanwhile.
func (l *eventLog) unwaitLocked(s *Subscription) {
	if s.waitAt == 0 {
		return
	}
	i, last := s.waitAt-1, len(l.waiting)-1
	l.waiting[i] = l.waiting[last]
	l.waiting[i].waitAt = i + 1
	l.waiting[last] = nil
	l.waiting = l.waiting[:last]
	s.waitAt = 0
	select {
	case <-s.wake:
	default:
	}
}

// jumpLocked empties the log and moves it on to seq: readers behind it get
// a *DroppedError.
func (l *eventLog) jumpLocked(seq uint64) {
	l.ring = l.ring[:0]
	l.base, l.next = seq, seq
	l.durable = seq - 1
}

// jump moves an empty or stale copy of a shared log on to seq.
func (l *eventLog) jump(seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq > l.next {
		l.jumpLocked(seq)
	}
}

// apply adds events stored by another replica, in seq order: the ones
// already held are skipped; a gap (the store trimmed them) moves the log on.
func (l *eventLog) apply(evs []Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	added := false
	for i := range evs {
		e := &evs[i]
		if e.Seq < l.next {
			continue
		}
		if e.Seq > l.next {
			l.jumpLocked(e.Seq)
		}
		l.storeLocked(holdEvent(l.sessionID, e))
		added = true
	}
	if added {
		l.durable = l.next - 1
		l.wakeLocked()
	}
}

// prepend adds older stored events in front of the held ones; evs must end
// just before the oldest held event. The log keeps at most size events.
func (l *eventLog) prepend(evs []Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(evs) == 0 || evs[len(evs)-1].Seq+1 != l.oldestLocked() {
		return
	}
	all := make([]heldEvent, 0, len(evs)+int(l.next-l.oldestLocked()))
	for i := range evs {
		all = append(all, holdEvent(l.sessionID, &evs[i]))
	}
	for seq := l.oldestLocked(); seq < l.next; seq++ {
		all = append(all, l.ring[(seq-l.base)%l.size])
	}
	if uint64(len(all)) > l.size {
		all = all[uint64(len(all))-l.size:]
	}
	l.ring, l.base = all, all[0].seq
}

// release drops the log's copy of its events when nobody reads them and
// the store holds every one: an idle session's events then live in the
// store alone (a later reader's older events come from there, see
// subscribeShared), not twice in memory. It reports whether it dropped any.
func (l *eventLog) release() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.gated || l.closed || l.fenced || l.subs > 0 || len(l.ring) == 0 || l.durable < l.next-1 {
		return false
	}
	giveRing(l.ring, l.ringBox)
	l.ring, l.ringBox, l.base, l.waiting = nil, nil, l.next, nil
	return true
}

// lastType is the type of the newest event held ("" when none is).
func (l *eventLog) lastType() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next == l.oldestLocked() {
		return ""
	}
	return l.ring[(l.next-1-l.base)%l.size].typ
}

// oldest is the oldest seq held (next when none is).
func (l *eventLog) oldest() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.oldestLocked()
}

// lastSeq is the seq of the newest event (0 when none).
func (l *eventLog) lastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// oldestLocked is the oldest seq still held.
func (l *eventLog) oldestLocked() uint64 {
	if l.next-l.base <= l.size {
		return l.base
	}
	return l.next - l.size
}

// close ends every reader once it has read what is there.
func (l *eventLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.wakeLocked()
	}
}

// subscribers is the number of readers following the log now.
func (l *eventLog) subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.subs
}

// Subscription reads a session's events in order, from a cursor on.
type Subscription struct {
	log   *eventLog
	after uint64
	buf   []heldEvent // the batch taken from the log, as it holds events
	cur   Event       // the one NextRef returned
	// pooled holds buf's array while it is taken from eventBufs: a reader
	// that catches up gives it back before it waits, so an idle reader
	// holds no copy of past events, and a live one takes no new array per
	// wake-up.
	pooled *[]heldEvent
	used   int // the most of it a fill used since it was taken
	closed bool
	epoch  uint64 // the log's fence epoch when it subscribed
	// wake gets a value when an event comes while the reader waits (made
	// by its first wait); waitAt is its place in the log's waiting, plus
	// one (0: not waiting). Both are the log's, under its lock.
	wake   chan struct{}
	waitAt int
	// interrupted is what the next wait returns at once, or the current
	// one ends with (Interrupt), when no event is there to read; under
	// the log's lock.
	interrupted error
}

// eventBufs are the readers' batch arrays.
var eventBufs = sync.Pool{New: func() any { b := make([]heldEvent, 0, 16); return &b }}

// subscribe returns a reader of the events after seq after. It fails at once
// with a *DroppedError when those are gone.
func (l *eventLog) subscribe(after uint64) (*Subscription, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if after > l.next-1 {
		return nil, fmt.Errorf("%d is beyond the newest event (%d)", after, l.next-1)
	}
	if oldest := l.oldestLocked(); after+1 < oldest {
		return nil, &DroppedError{After: after, Oldest: oldest}
	}
	l.subs++
	return &Subscription{log: l, after: after, epoch: l.epoch}, nil
}

// Next returns the next event, waiting for one when needed. It returns
// ErrLogClosed after the last event of a closed log, a *DroppedError when the
// reader fell behind, or ctx's error.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	e, err := s.NextRef(ctx)
	if err != nil {
		return Event{}, err
	}
	return *e, nil
}

// NextRef is Next without the copy: the event it points to stays valid
// until the next call (a reader forwarding events keeps its stack small:
// an Event is several hundred bytes).
func (s *Subscription) NextRef(ctx context.Context) (*Event, error) {
	for len(s.buf) == 0 {
		if err := s.fill(ctx); err != nil {
			return nil, err
		}
	}
	s.cur = s.buf[0].event(s.log.sessionID)
	s.buf = s.buf[1:]
	s.after = s.cur.Seq
	return &s.cur, nil
}

// Buffered is how many events NextRef returns without waiting: those
// already taken from the log in the last batch. A writer forwarding them
// flushes once the batch is out, not after each.
func (s *Subscription) Buffered() int { return len(s.buf) }

// fill copies every held event after the cursor, or waits for one.
func (s *Subscription) fill(ctx context.Context) error {
	l := s.log
	l.mu.Lock()
	if oldest := l.oldestLocked(); s.after+1 < oldest {
		l.mu.Unlock()
		l.onDrop()
		return &DroppedError{After: s.after, Oldest: oldest}
	}
	visible := l.visibleLocked()
	resumeAt := ^uint64(0)
	if s.epoch != l.epoch {
		// Fenced since it subscribed: the reader reads up to the fence's
		// point, not what the log took after it (another prompt's events,
		// or the store's after a failover, at seqs it may have read).
		resumeAt = l.fencedSinceLocked(s.epoch)
		visible = min(visible, resumeAt)
	}
	if visible > s.after {
		n := visible - s.after
		const batch = 256
		n = min(n, batch)
		if s.pooled == nil {
			s.pooled = eventBufs.Get().(*[]heldEvent)
		}
		b := (*s.pooled)[:0]
		for seq := s.after + 1; seq <= s.after+n; seq++ {
			b = append(b, l.ring[(seq-l.base)%l.size])
		}
		*s.pooled, s.buf, s.used = b, b, max(s.used, len(b))
		l.mu.Unlock()
		return nil
	}
	if s.epoch != l.epoch {
		l.mu.Unlock()
		return &ResumeError{After: min(s.after, resumeAt)}
	}
	if l.closed {
		l.mu.Unlock()
		return ErrLogClosed
	}
	if err := s.interrupted; err != nil {
		s.interrupted = nil
		l.mu.Unlock()
		return err
	}
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	l.waiting = append(l.waiting, s)
	s.waitAt = len(l.waiting)
	wake := s.wake
	l.mu.Unlock()
	// A reader that caught up lets its buffer go while it waits: an idle
	// reader holds no copy of past events.
	s.release()
	if hook := testHookWait.Load(); hook != nil {
		(*hook)(l)
	}
	select {
	case <-wake:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		l.unwaitLocked(s)
		// An event that came while the reader waited is read before the
		// end of its context shows: select picks at random when both are
		// ready, and a server draining (it ends its streams' contexts
		// once every prompt has ended) would otherwise end a stream
		// without its prompt_end.
		ready := l.visibleLocked() > s.after
		l.mu.Unlock()
		if ready {
			return nil
		}
		return ctx.Err()
	}
}

// Interrupt ends the reader's wait for an event, the current one or else
// the next, with err; an event already there to read, or coming before
// the wait ends, is read first. A reader that waits on its own context
// can so also be woken by a server's drain or a heartbeat's timer (their
// callbacks call it from any goroutine) with no context of their own,
// and its wait stays a select on two channels. Errors not returned yet
// are joined (errors.Join): none is lost to a later one.
func (s *Subscription) Interrupt(err error) {
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case s.interrupted == nil:
		s.interrupted = err
	case !errors.Is(s.interrupted, err):
		s.interrupted = errors.Join(s.interrupted, err)
	}
	if s.waitAt != 0 {
		// Waiting: off the log's waiting readers, and woken (unwait
		// leaves its wake channel empty).
		l.unwaitLocked(s)
		s.wake <- struct{}{}
	}
}

// testHookWait, when set (by tests only), runs as a reader is about to
// wait on l: after it is among the log's waiting readers, before the wait.
// Atomic: a reader another test left running may wait meanwhile.
var testHookWait atomic.Pointer[func(l *eventLog)]

// release gives the batch array back to the pool, cleared (it holds no
// event's strings for the garbage collector to keep).
func (s *Subscription) release() {
	if s.pooled == nil {
		s.buf = nil
		return
	}
	b := *s.pooled
	clear(b[:s.used])
	*s.pooled = b[:0]
	eventBufs.Put(s.pooled)
	s.pooled, s.buf, s.used = nil, nil, 0
}

// Close releases the subscription. It is safe to call more than once.
func (s *Subscription) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.release()
	s.log.mu.Lock()
	s.log.unwaitLocked(s)
	s.log.subs--
	s.log.mu.Unlock()
}
