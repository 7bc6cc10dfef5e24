package sessionstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/session"
)

// errDropped is the Flush error of events dropped from a full queue (or
// by Close) before they could be written.
var errDropped = errors.New("sessionstore: events dropped before they were written (writer queue full or store closed)")

// writer is the background event writer. AppendEvent queues; one goroutine
// takes everything queued (up to maxBatch) and writes it in one pipeline,
// while new events accumulate for the next one.
//
// Each session's events are written in seq order by one fenced script
// (eventsScript) per session and batch. What becomes of them is told to the
// session.EventWatch: stored, or lost for good (the lease is another's, or
// the stream lost events before them). Events whose write failed otherwise
// (Redis unreachable, a failover under way) go back to the front of the
// queue and are written again after a pause: the script skips those already
// stored, so a batch whose reply was lost is not written twice.
//
// Every queued event gets a number n (1, 2, …); a session's pending.done
// is the number of its latest event written or given up (its events are
// handled in order), which Flush waits for.
type writer struct {
	r *Redis

	mu       sync.Mutex
	queue    []item
	queued   uint64 // number of the latest queued event
	pending  map[string]*pending
	changed  chan struct{} // closed (and replaced) when a session's done moves
	closing  bool
	dropped  int // events dropped since the last warning
	warnedAt time.Time
	lost     map[string]error // sessions whose events were dropped, to tell the watch
	watch    atomic.Pointer[session.EventWatch]

	// spare is the array of a queue the writer took whole, wrote and
	// cleared: the next queue's (under mu), so that a batch costs no
	// array of its own.
	spare []item

	wake   chan struct{}
	ctx    context.Context // cancelled when Close gives up draining
	cancel context.CancelFunc
	exited chan struct{}

	// The writer goroutine's working memory for write, kept from one
	// batch to the next and cleared after each.
	scratch writeScratch
}

type item struct {
	n  uint64
	id string
	e  session.Event
	// The fence of the lease the event was emitted under ("": none): a
	// queued event is written under it, or not at all, whatever this
	// replica holds by the time it is written.
	replica, epoch string
}

// pending is what Flush needs of a session: the numbers of its latest
// queued event and of its latest one handled, and an error of its events
// not yet reported.
type pending struct {
	last uint64
	done uint64
	err  error
}

// Pauses between the retries of events whose write failed.
const (
	retryPauseMin = 10 * time.Millisecond
	retryPauseMax = 500 * time.Millisecond
)

func newWriter(r *Redis) *writer {
	w := &writer{r: r, pending: map[string]*pending{}, changed: make(chan struct{}),
		wake: make(chan struct{}, 1), exited: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// WatchEvents implements session.Shared.
func (r *Redis) WatchEvents(w session.EventWatch) { r.w.watch.Store(&w) }

// AppendEvent implements session.Shared: it queues e and wakes the
// writer, never waiting for Redis. Beyond the queue's bound the oldest
// events are dropped (their sessions' events are lost: the watch is told);
// after Close events are dropped.
func (r *Redis) AppendEvent(id string, e session.Event) {
	if e.SessionID == "" {
		e.SessionID = id
	}
	w := r.w
	replica, epoch := r.fences.of(r.id, id)
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		r.log.Debug("session store: event appended after Close, dropped", "session", id, "seq", e.Seq)
		return
	}
	w.queued++
	w.queue = append(w.queue, item{n: w.queued, id: id, e: e, replica: replica, epoch: epoch})
	p := w.pending[id]
	if p == nil {
		p = &pending{done: w.queued - 1}
		w.pending[id] = p
	}
	p.last = w.queued
	if over := len(w.queue) - r.o.maxQueue; over > 0 {
		w.overflowLocked(over)
	}
	w.mu.Unlock()
	w.poke()
}

func (w *writer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// dropLocked drops the n oldest queued events; Flush reports errDropped
// for their sessions, and the watch hears they are lost.
func (w *writer) dropLocked(n int) {
	for _, it := range w.queue[:n] {
		w.handledLocked(it, errDropped)
		if w.lost == nil {
			w.lost = map[string]error{}
		}
		w.lost[it.id] = errDropped
	}
	// Reslice (the next growth of the queue copies only what is live);
	// clear, so the dropped events are not kept reachable meanwhile.
	clear(w.queue[:n])
	w.queue = w.queue[n:]
	w.changedLocked()
}

// overflowLocked drops the oldest events beyond the queue's bound, with
// a warning at most every 10s.
func (w *writer) overflowLocked(n int) {
	w.dropLocked(n)
	w.dropped += n
	if time.Since(w.warnedAt) >= 10*time.Second {
		w.r.log.Warn("session store: event queue full (Redis slow or down): oldest events dropped",
			"dropped", w.dropped, "queue", len(w.queue))
		w.dropped, w.warnedAt = 0, time.Now()
	}
}

// handledLocked records that it was written or given up (err).
func (w *writer) handledLocked(it item, err error) {
	p := w.pending[it.id]
	if p == nil {
		return
	}
	p.done = max(p.done, it.n)
	if err != nil && p.err == nil {
		p.err = err
	}
	if p.done >= p.last && p.err == nil {
		delete(w.pending, it.id)
	}
}

// changedLocked wakes the Flush calls waiting.
func (w *writer) changedLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// forget drops the queued events of a session that was removed, or whose
// prompt this replica gave up.
func (w *writer) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.queue[:0]
	for _, it := range w.queue {
		if it.id != id {
			kept = append(kept, it)
		}
	}
	clear(w.queue[len(kept):])
	w.queue = kept
	delete(w.pending, id)
	delete(w.lost, id)
	w.changedLocked()
}

// Flush implements session.Shared: it waits until every event queued for
// id before the call has been written or given up, and returns the error
// of those given up (each error is reported once). It waits at most
// Options.Timeout (when ctx has no tighter deadline): events not stored
// by then stay queued, and the error says so.
func (r *Redis) Flush(ctx context.Context, id string) error {
	ctx, cancel := r.op(ctx)
	defer cancel()
	w := r.w
	w.mu.Lock()
	p := w.pending[id]
	if p == nil {
		w.mu.Unlock()
		return nil
	}
	target := p.last
	for p.done < target {
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sessionstore: flush %s: events not stored yet: %w", id, ctx.Err())
		}
		w.mu.Lock()
		if w.pending[id] != p {
			// Handled and dropped, or forgotten.
			break
		}
	}
	err := p.err
	p.err = nil
	if w.pending[id] == p && p.done >= p.last {
		delete(w.pending, id)
	}
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sessionstore: flush %s: %w", id, err)
	}
	return nil
}

// run is the writer goroutine.
func (w *writer) run() {
	defer close(w.exited)
	pause := time.Duration(0)
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && len(w.lost) == 0 && !w.closing {
			w.mu.Unlock()
			<-w.wake
			// Woken by the first event of a batch: the goroutines already
			// runnable (other sessions' runs, a provider's data in hand) run
			// first, so that what they publish now rides this batch's round
			// trip instead of waiting for the next one. No clock: with
			// nothing else runnable the writer goes on at once.
			runtime.Gosched()
			w.mu.Lock()
		}
		lost := w.lost
		w.lost = nil
		if len(lost) > 0 {
			w.mu.Unlock()
			for id, err := range lost {
				w.tellLost(id, 0, err)
			}
			continue
		}
		if len(w.queue) == 0 || w.ctx.Err() != nil {
			// Closing: nothing left, or Close gave up waiting.
			if n := len(w.queue); n > 0 {
				w.r.log.Warn("session store: closed before these events could be written", "events", n)
				w.dropLocked(n)
			}
			w.mu.Unlock()
			return
		}
		n := min(len(w.queue), maxBatch)
		batch := w.queue[:n:n]
		whole := n == len(w.queue)
		var array []item // the queue's, taken whole, with its room to grow
		if whole {
			array = w.queue[:0]
			w.queue, w.spare = w.spare, nil
		} else {
			w.queue = w.queue[n:]
		}
		w.mu.Unlock()

		retry := w.write(batch)

		w.mu.Lock()
		if len(retry) > 0 {
			// Back to the front, in order, for the next batch.
			w.queue = append(retry, w.queue...)
		}
		if whole && cap(array) <= keptBatch {
			// Cleared: nothing of the events written stays reachable.
			clear(batch)
			w.spare = array
		}
		w.changedLocked()
		w.mu.Unlock()
		if len(retry) == 0 {
			pause = 0
			continue
		}
		pause = min(max(2*pause, retryPauseMin), retryPauseMax)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-w.ctx.Done():
		}
		t.Stop()
	}
}

// tellLost tells the watch that id's events after stored (0: unknown)
// will not be stored.
func (w *writer) tellLost(id string, stored uint64, err error) {
	if wt := w.watch.Load(); wt != nil && wt.Lost != nil {
		wt.Lost(id, stored, err)
	}
}

// close makes the writer write what is queued and stop, waiting at most
// Options.Timeout before giving up on the rest.
func (w *writer) close() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(w.r.o.Timeout)
	defer t.Stop()
	select {
	case <-w.exited:
	case <-t.C:
		w.cancel()
		<-w.exited
	}
	w.cancel()
}

// write stores one batch in one pipeline: per session, its events by one
// fenced script (eventsScript), then a PUBLISH. It returns the events to
// write again: those of the sessions whose write failed for a reason that
// may pass.
func (w *writer) write(batch []item) (retry []item) {
	r := w.r
	ctx, cancel := context.WithTimeout(w.ctx, r.o.Timeout)
	defer cancel()
	// The batch's sessions in order of their first event, each with its
	// items (in seq order: they were queued so), split where the lease
	// they were emitted under changes.
	sc := &w.scratch
	defer sc.reset(len(batch))
	runs := sc.group(batch)
	var encodeErr map[string]error
	// The batch's entries, encoded into one buffer (an entry's bytes stay
	// where they were written when the buffer grows: a grown buffer is a
	// copy).
	buf := slices.Grow(sc.buf[:0], 192*len(batch))
	defer func() { sc.buf = buf }()
	_ = r.pipeScripts(ctx, func(pipe redis.Pipeliner, call scriptRunner) {
		for k := range runs {
			ru := &runs[k]
			args := append(fenceArgvRoom(ru.items[0].replica, ru.items[0].epoch, 1+2*len(ru.items)), int64(r.o.EventBuffer))
			for i := range ru.items {
				it := &ru.items[i]
				o := len(buf)
				var err error
				buf, err = appendStoredEvent(buf, &it.e)
				data := buf[o:len(buf):len(buf)]
				if err != nil {
					if encodeErr == nil {
						encodeErr = map[string]error{}
					}
					encodeErr[ru.id] = err
					break
				}
				args = append(args, it.e.Seq, data)
			}
			if encodeErr[ru.id] != nil {
				continue
			}
			ru.call = call(eventsScript, r.fencedKeys(ru.id, "events"), args...)
			ru.pub = pipe.Publish(ctx, r.notifyChannel(ru.id), r.id)
		}
	}) // every command carries its own error

	type outcome struct {
		id     string
		stored uint64
		err    error // nil: stored up to stored
	}
	told := make([]outcome, 0, len(runs))
	failed := 0
	var firstErr error
	w.mu.Lock()
	for k := range runs {
		ru := &runs[k]
		var err error
		var stored uint64
		switch {
		case encodeErr[ru.id] != nil:
			r.log.Error("session store: event not encodable", "session", ru.id, "err", encodeErr[ru.id])
			err = encodeErr[ru.id]
		default:
			reply, cerr := ru.call.cmd.Slice()
			switch {
			case isFenced(cerr):
				r.fences.loseEpoch(ru.id, ru.items[0].epoch)
				err = session.ErrFenced
			case cerr != nil:
				failed++
				if firstErr == nil {
					firstErr = cerr
				}
				if _, live := w.pending[ru.id]; live {
					// Not forgotten meanwhile (a Remove, a Release).
					retry = append(retry, ru.items...)
				}
				continue
			default:
				status, _ := firstInt(reply)
				top := int64(0)
				if len(reply) == 2 {
					top, _ = reply[1].(int64)
				}
				stored = uint64(top)
				if status != 1 {
					r.fences.loseEpoch(ru.id, ru.items[0].epoch)
					err = fmt.Errorf("%w: the stored stream ends at seq %d, short of the events after it", session.ErrEventsLost, top)
				}
			}
		}
		if _, live := w.pending[ru.id]; !live {
			continue // forgotten meanwhile
		}
		for _, it := range ru.items {
			w.handledLocked(it, err)
		}
		if err != nil {
			// What is queued of the session under that lease is lost too.
			w.dropSessionLocked(ru.id, ru.items[0].epoch, err)
			if _, now := r.fences.of(r.id, ru.id); now != lostEpoch && now != ru.items[0].epoch {
				// Events of an older lease: the session's prompt now runs
				// under another, which this does not concern.
				r.log.Warn("session store: events of an earlier lease not stored", "session", ru.id, "err", err)
				continue
			}
		}
		told = append(told, outcome{ru.id, stored, err})
	}
	w.mu.Unlock()
	if failed > 0 {
		r.log.Warn("session store: events not stored yet (written again shortly)",
			"sessions", failed, "err", firstErr)
	}
	wt := w.watch.Load()
	for _, o := range told {
		switch {
		case wt == nil:
		case o.err == nil && wt.Stored != nil:
			wt.Stored(o.id, o.stored)
		case o.err != nil && wt.Lost != nil:
			wt.Lost(o.id, o.stored, o.err)
		}
	}
	for k := range runs {
		ru := &runs[k]
		if ru.pub != nil && ru.pub.Err() != nil && ru.call.cmd.Err() == nil {
			r.log.Warn("session store: followers not notified", "session", ru.id, "err", ru.pub.Err())
		}
	}
	return retry
}

// keptBatch bounds the batches whose memory the writer keeps for the next
// (its queue's array and its scratch): a burst's larger ones go to the
// garbage collector, so a quiet store holds little.
const keptBatch = 256

// writeScratch is write's working memory: the batch grouped into the runs
// of its sessions, and the buffer of its encoded entries.
type writeScratch struct {
	runs  []writeRun
	byKey map[runKey]int // a run's index in runs
	at    []int          // each item's run, in the batch's order
	items []item         // the batch's items, run after run
	buf   []byte
}

// writeRun is one session's events of a batch under one lease, and their
// script's and notification's commands once queued.
type writeRun struct {
	id    string
	items []item // in seq order: they were queued so
	n     int    // while grouping: the number of its items
	call  *scriptCall
	pub   *redis.IntCmd
}

type runKey struct{ id, epoch string }

// group splits batch into the runs of its sessions, in order of their
// first event, each with its items, split where the lease they were
// emitted under changes.
func (sc *writeScratch) group(batch []item) []writeRun {
	if sc.byKey == nil {
		sc.byKey = map[runKey]int{}
	}
	for _, it := range batch {
		k := runKey{it.id, it.epoch}
		j, ok := sc.byKey[k]
		if !ok {
			j = len(sc.runs)
			sc.byKey[k] = j
			sc.runs = append(sc.runs, writeRun{id: it.id})
		}
		sc.runs[j].n++
		sc.at = append(sc.at, j)
	}
	sc.items = slices.Grow(sc.items[:0], len(batch))[:len(batch)]
	o := 0
	for j := range sc.runs {
		n := sc.runs[j].n
		sc.runs[j].items = sc.items[o : o : o+n]
		o += n
	}
	for i, it := range batch {
		ru := &sc.runs[sc.at[i]]
		ru.items = append(ru.items, it)
	}
	return sc.runs
}

// reset clears what the last batch (of n items) left, so that nothing of
// its events stays reachable, and lets go of a burst's memory.
func (sc *writeScratch) reset(n int) {
	if n > keptBatch {
		*sc = writeScratch{}
		return
	}
	clear(sc.runs)
	clear(sc.byKey)
	clear(sc.items)
	sc.runs, sc.at, sc.items = sc.runs[:0], sc.at[:0], sc.items[:0]
	if cap(sc.buf) > keptBatch*512 {
		sc.buf = nil
	}
}

// dropSessionLocked drops what is queued of id under the lease of epoch,
// its events lost by err.
func (w *writer) dropSessionLocked(id, epoch string, err error) {
	kept := w.queue[:0]
	for _, it := range w.queue {
		if it.id == id && it.epoch == epoch {
			w.handledLocked(it, err)
			continue
		}
		kept = append(kept, it)
	}
	clear(w.queue[len(kept):])
	w.queue = kept
}

// parseSeq parses a stream entry id "<seq>-0".
func parseSeq(id string) (uint64, error) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseUint(ms, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("event id %q: %w", id, err)
	}
	return n, nil
}

// LastSeq is the seq of the newest stored event of session id, 0 when none.
func (r *Redis) LastSeq(ctx context.Context, id string) (uint64, error) {
	ctx, cancel := r.op(ctx)
	defer cancel()
	msgs, err := r.c.XRevRangeN(ctx, r.key(id, "events"), "+", "-", 1).Result()
	if err != nil {
		return 0, wrap("last seq of "+id, err)
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	seq, err := parseSeq(msgs[0].ID)
	if err != nil {
		return 0, fmt.Errorf("sessionstore: last seq of %s: %w", id, err)
	}
	return seq, nil
}

// Events implements session.Shared (XRANGE from after+1).
func (r *Redis) Events(ctx context.Context, id string, after uint64, count int) ([]session.Event, error) {
	if count <= 0 || after == ^uint64(0) {
		return nil, nil
	}
	ctx, cancel := r.op(ctx)
	defer cancel()
	msgs, err := r.c.XRangeN(ctx, r.key(id, "events"), strconv.FormatUint(after+1, 10), "+", int64(count)).Result()
	if err != nil {
		return nil, wrap("events of "+id, err)
	}
	out := make([]session.Event, 0, len(msgs))
	for _, m := range msgs {
		seq, err := parseSeq(m.ID)
		if err != nil {
			return nil, fmt.Errorf("sessionstore: events of %s: %w", id, err)
		}
		raw, _ := m.Values["e"].(string)
		var e session.Event
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			return nil, fmt.Errorf("sessionstore: events of %s, seq %d: %w", id, seq, err)
		}
		e.Seq = seq
		if e.SessionID == "" {
			e.SessionID = id
		}
		out = append(out, e)
	}
	return out, nil
}
