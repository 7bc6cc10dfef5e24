package sessionstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
// Every queued event gets a number n (1, 2, …). done is the highest n
// such that every event numbered up to n has been written or given up;
// Flush waits for done to reach the number of the session's latest event.
type writer struct {
	r *Redis

	mu       sync.Mutex
	queue    []item
	queued   uint64 // number of the latest queued event
	done     uint64
	inflight bool
	inStart  uint64 // number of the first event of the batch in flight
	pending  map[string]*pending
	changed  chan struct{} // closed (and replaced) when done moves
	closing  bool
	dropped  int // events dropped since the last warning
	warnedAt time.Time

	wake   chan struct{}
	ctx    context.Context // cancelled when Close gives up draining
	cancel context.CancelFunc
	exited chan struct{}
}

type item struct {
	n  uint64
	id string
	e  session.Event
}

// pending is what Flush needs of a session: its latest queued event's
// number, and an error of a batch of its events not yet reported.
type pending struct {
	last uint64
	err  error
}

func newWriter(r *Redis) *writer {
	w := &writer{r: r, pending: map[string]*pending{}, changed: make(chan struct{}),
		wake: make(chan struct{}, 1), exited: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// AppendEvent implements session.Shared: it queues e and wakes the
// writer, never waiting for Redis. Beyond the queue's bound the oldest
// events are dropped (logged); after Close events are dropped.
func (r *Redis) AppendEvent(id string, e session.Event) {
	if e.SessionID == "" {
		e.SessionID = id
	}
	w := r.w
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		r.log.Debug("session store: event appended after Close, dropped", "session", id, "seq", e.Seq)
		return
	}
	w.queued++
	w.queue = append(w.queue, item{n: w.queued, id: id, e: e})
	p := w.pending[id]
	if p == nil {
		p = &pending{}
		w.pending[id] = p
	}
	p.last = w.queued
	if over := len(w.queue) - r.o.maxQueue; over > 0 {
		w.overflowLocked(over)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// dropLocked drops the n oldest queued events; Flush reports errDropped
// for their sessions.
func (w *writer) dropLocked(n int) {
	for _, it := range w.queue[:n] {
		if p := w.pending[it.id]; p != nil {
			p.err = errDropped
		}
	}
	// Reslice (the next growth of the queue copies only what is live);
	// clear, so the dropped events are not kept reachable meanwhile.
	clear(w.queue[:n])
	w.queue = w.queue[n:]
	w.advanceLocked()
}

// overflowLocked drops the oldest events beyond the queue's bound, with
// a warning at most every 10s.
func (w *writer) overflowLocked(n int) {
	w.dropLocked(n)
	w.dropped += n
	if time.Since(w.warnedAt) >= 10*time.Second {
		w.r.log.Warn("session store: event queue full (Redis slow or down): oldest events dropped, they stay in their owner's memory",
			"dropped", w.dropped, "queue", len(w.queue))
		w.dropped, w.warnedAt = 0, time.Now()
	}
}

// advanceLocked moves done to what the queue and the batch in flight
// allow, and wakes the Flush calls waiting.
func (w *writer) advanceLocked() {
	d := w.queued
	if len(w.queue) > 0 {
		d = w.queue[0].n - 1
	}
	if w.inflight {
		d = min(d, w.inStart-1)
	}
	if d > w.done {
		w.done = d
		close(w.changed)
		w.changed = make(chan struct{})
	}
}

// cleanLocked drops the pending entries of ids that have nothing queued
// nor an error to report.
func (w *writer) cleanLocked(ids map[string]error) {
	for id := range ids {
		if p := w.pending[id]; p != nil && p.last <= w.done && p.err == nil {
			delete(w.pending, id)
		}
	}
}

// forget drops the queued events of a removed session.
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
	w.advanceLocked()
}

// Flush implements session.Shared: it waits until every event queued for
// id before the call has been written or given up, and returns the error
// of a batch of them that failed (each error is reported once).
func (r *Redis) Flush(ctx context.Context, id string) error {
	w := r.w
	w.mu.Lock()
	p := w.pending[id]
	if p == nil {
		w.mu.Unlock()
		return nil
	}
	target := p.last
	for w.done < target {
		ch := w.changed
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sessionstore: flush %s: %w", id, ctx.Err())
		}
		w.mu.Lock()
	}
	err := p.err
	p.err = nil
	if w.pending[id] == p && p.last <= w.done {
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
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.closing {
			w.mu.Unlock()
			<-w.wake
			w.mu.Lock()
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
		if n == len(w.queue) {
			w.queue = nil
		} else {
			w.queue = w.queue[n:]
		}
		w.inflight, w.inStart = true, batch[0].n
		w.mu.Unlock()

		errs := w.write(batch)

		w.mu.Lock()
		w.inflight = false
		for id, err := range errs {
			if p := w.pending[id]; p != nil && err != nil {
				p.err = err
			}
		}
		w.advanceLocked()
		w.cleanLocked(errs)
		w.mu.Unlock()
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

// write stores one batch in one pipeline: an XADD per event, then a
// PUBLISH per session. It returns every session of the batch, with the
// error that kept some of its events out of Redis (nil when none did).
func (w *writer) write(batch []item) map[string]error {
	r := w.r
	ctx, cancel := context.WithTimeout(w.ctx, r.o.Timeout)
	defer cancel()
	errs := map[string]error{}
	var order []string
	pipe := r.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(batch))
	for i, it := range batch {
		if _, seen := errs[it.id]; !seen {
			errs[it.id] = nil
			order = append(order, it.id)
		}
		data, err := json.Marshal(it.e)
		if err != nil {
			r.log.Error("session store: event not encodable", "session", it.id, "seq", it.e.Seq, "err", err)
			errs[it.id] = err
			continue
		}
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: r.key(it.id, "events"),
			MaxLen: int64(r.o.EventBuffer),
			Approx: true,
			ID:     fmt.Sprintf("%d-0", it.e.Seq),
			Values: []any{"e", data},
		})
	}
	// After a session's XADDs, the guard gives its stream a TTL should its
	// record be gone (a Remove racing this batch: see guardScript).
	pubs := make([]*redis.IntCmd, len(order))
	guards := make([]*redis.Cmd, len(order))
	for i, id := range order {
		guards[i] = guardScript.EvalSha(ctx, pipe, r.guardKeys(id, "events"), orphanTTL.Milliseconds())
		pubs[i] = pipe.Publish(ctx, r.notifyChannel(id), r.id)
	}
	_, _ = pipe.Exec(ctx) // every command carries its own error
	w.guardAgain(ctx, order, guards)

	failed, sessions := 0, map[string]bool{}
	var firstErr error
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		err := cmd.Err()
		if err == nil {
			continue
		}
		it := batch[i]
		if isStaleID(err) {
			r.log.Warn("session store: event not stored, its seq is not above the stream's newest (another replica wrote it)",
				"session", it.id, "seq", it.e.Seq)
			continue
		}
		failed++
		sessions[it.id] = true
		if firstErr == nil {
			firstErr = err
		}
		if errs[it.id] == nil {
			errs[it.id] = fmt.Errorf("redis: %w", err)
		}
	}
	if failed > 0 {
		r.log.Error("session store: events not stored (they stay in their owner's memory)",
			"events", failed, "sessions", len(sessions), "err", firstErr)
	} else {
		for i, cmd := range pubs {
			if err := cmd.Err(); err != nil {
				r.log.Warn("session store: followers not notified", "session", order[i], "err", err)
			}
		}
	}
	return errs
}

// guardAgain runs with its text (EVAL) the guards the server did not have
// (NOSCRIPT), after the batch's XADDs as they must be.
func (w *writer) guardAgain(ctx context.Context, order []string, guards []*redis.Cmd) {
	r := w.r
	var pipe redis.Pipeliner
	for i, g := range guards {
		if !isNoScript(g.Err()) {
			continue
		}
		if pipe == nil {
			pipe = r.c.Pipeline()
		}
		guardScript.Eval(ctx, pipe, r.guardKeys(order[i], "events"), orphanTTL.Milliseconds())
	}
	if pipe == nil {
		return
	}
	if _, err := pipe.Exec(ctx); err != nil {
		r.log.Warn("session store: the streams of removed sessions may stay without a TTL", "err", err)
	}
}

// isStaleID reports whether XADD refused an id not above the stream's top.
func isStaleID(err error) bool {
	return strings.Contains(err.Error(), "equal or smaller than the target stream top item")
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
