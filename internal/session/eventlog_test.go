package session

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

func TestEventLogOrderAndResume(t *testing.T) {
	l := newEventLog("s", 16, time.Now, nil)
	for range 10 {
		l.publish(Event{Type: EventMessageUpdate})
	}
	sub, err := l.subscribe(4)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for want := uint64(5); want <= 10; want++ {
		e, err := sub.Next(ctx)
		if err != nil || e.Seq != want || e.SessionID != "s" {
			t.Fatalf("Next = %d %q, %v; want seq %d", e.Seq, e.SessionID, err, want)
		}
	}
	// A live event wakes the reader.
	go l.publish(Event{Type: EventAgentEnd})
	if e, err := sub.Next(ctx); err != nil || e.Seq != 11 || e.Type != EventAgentEnd {
		t.Fatalf("live Next = %+v, %v", e, err)
	}
	if _, err := l.subscribe(12); err == nil {
		t.Fatal("subscribe beyond the newest event succeeded")
	}
}

func TestEventLogDroppedIsAnErrorNotAGap(t *testing.T) {
	l := newEventLog("s", 16, time.Now, nil)
	slow, err := l.subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	for range 40 {
		l.publish(Event{Type: EventMessageUpdate})
	}
	ctx := context.Background()
	_, err = slow.Next(ctx)
	var dropped *DroppedError
	if !errors.As(err, &dropped) || !errors.Is(err, ErrEventsDropped) || dropped.Oldest != 25 {
		t.Fatalf("slow reader: %v, want events dropped with oldest 25", err)
	}
	// Asking for events already gone fails at once; resuming from what is
	// held works.
	if _, err := l.subscribe(3); !errors.As(err, &dropped) {
		t.Fatalf("subscribe(3) = %v, want DroppedError", err)
	}
	sub, err := l.subscribe(dropped.Oldest - 1)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if e, err := sub.Next(ctx); err != nil || e.Seq != 25 {
		t.Fatalf("resumed Next = %d, %v", e.Seq, err)
	}
}

func TestEventLogCloseDeliversThenEnds(t *testing.T) {
	l := newEventLog("s", 16, time.Now, nil)
	sub, _ := l.subscribe(0)
	defer sub.Close()
	l.publish(Event{Type: EventPromptEnd})
	l.close()
	ctx := context.Background()
	if e, err := sub.Next(ctx); err != nil || e.Type != EventPromptEnd {
		t.Fatalf("Next = %+v, %v", e, err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, ErrLogClosed) {
		t.Fatalf("Next after close = %v", err)
	}
}

// Many readers, one fast writer: every reader sees every event in order or
// a clear DroppedError; the writer never blocks.
func TestEventLogFanOut(t *testing.T) {
	l := newEventLog("s", 64, time.Now, nil)
	const readers, events = 50, 5000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range readers {
		sub, err := l.subscribe(0)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer sub.Close()
			var last uint64
			for last < events {
				e, err := sub.Next(ctx)
				if errors.Is(err, ErrEventsDropped) {
					var d *DroppedError
					errors.As(err, &d)
					if d.After != last {
						t.Errorf("dropped after %d, reader was at %d", d.After, last)
					}
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if e.Seq != last+1 {
					t.Errorf("seq %d after %d", e.Seq, last)
					return
				}
				last = e.Seq
			}
		})
	}
	for range events {
		l.publish(Event{Type: EventMessageUpdate})
	}
	wg.Wait()
	if n := l.subscribers(); n != 0 {
		t.Fatalf("subscribers after close = %d", n)
	}
}

// A reader keeping up with the log waits for each event without an
// allocation of its own; a wait that ends with its context takes the
// reader off the log's waiting readers (none left after many), and a
// wake-up that came meanwhile does not return a later wait early.
func TestEventLogWaitsWithoutAllocating(t *testing.T) {
	l := newEventLog("s", 16, time.Now, nil)
	sub, err := l.subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got := make(chan uint64)
	go func() {
		for {
			e, err := sub.NextRef(ctx)
			if err != nil {
				close(got)
				return
			}
			got <- e.Seq
		}
	}()
	publishAndRead := func() {
		// The reader waits before the event comes (it is back in NextRef
		// once it has handed the last one over).
		for !waiting(l, sub) {
			if ctx.Err() != nil {
				t.Fatal("the reader never waited")
			}
			runtime.Gosched()
		}
		e, _ := l.publish(Event{Type: EventMessageUpdate})
		if seq := <-got; seq != e.Seq {
			t.Fatalf("read seq %d, published %d", seq, e.Seq)
		}
	}
	for range 20 {
		publishAndRead()
	}
	// holdEvent's copy of the event is the log's; the wait costs nothing.
	if n := testing.AllocsPerRun(200, publishAndRead); n > 0 {
		t.Errorf("%.1f allocations an event published and read, want 0", n)
	}
	cancel()
	if _, ok := <-got; ok {
		t.Fatal("the reader read on after its context ended")
	}

	// Waits ended by their context leave nothing behind.
	for range 100 {
		wctx, stop := context.WithTimeout(context.Background(), time.Microsecond)
		if _, err := sub.NextRef(wctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("NextRef on an idle log = %v", err)
		}
		stop()
	}
	l.mu.Lock()
	n := len(l.waiting)
	l.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d waiting readers after their waits ended", n)
	}
	// A wake-up sent to a wait that had ended is dropped with it, not
	// left for the next wait to find.
	l.mu.Lock()
	l.waiting = append(l.waiting, sub)
	sub.waitAt = len(l.waiting)
	sub.wake <- struct{}{} // as if an event came as the wait ended
	l.unwaitLocked(sub)
	left := len(sub.wake)
	l.mu.Unlock()
	if left != 0 {
		t.Fatal("a wake-up of an ended wait was left for the next")
	}
}

// waiting reports whether sub waits for an event of l.
func waiting(l *eventLog, sub *Subscription) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sub.waitAt != 0
}

// TestEventLogReadsWhatCameBeforeItsContextEnded: an event published while
// the reader is about to wait is returned even when the reader's context
// has ended by the time it waits (a server drains so: every prompt ends
// with its prompt_end, then the streams' contexts end). With both ready,
// the wait used to pick one at random, and a stream could end without its
// last event.
func TestEventLogReadsWhatCameBeforeItsContextEnded(t *testing.T) {
	l := newEventLog("s", 1024, time.Now, nil)
	sub, err := l.subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var cancel context.CancelFunc
	var want Event
	hook := func(at *eventLog) {
		if at == l {
			// Both come while the reader is among the waiting ones,
			// before it waits.
			want, _ = l.publish(Event{Type: EventMessageUpdate, TextDelta: "x"})
			cancel()
		}
	}
	testHookWait.Store(&hook)
	defer testHookWait.Store(nil)
	for i := range 64 {
		var ctx context.Context
		ctx, cancel = context.WithCancel(t.Context())
		e, err := sub.NextRef(ctx)
		if err != nil {
			t.Fatalf("round %d: NextRef = %v, want the event published before the context ended", i, err)
		}
		if e.Seq != want.Seq {
			t.Fatalf("round %d: got seq %d, want %d", i, e.Seq, want.Seq)
		}
	}
	testHookWait.Store(nil)
	// With nothing to read, the end of the context still ends the wait.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := sub.NextRef(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("NextRef on an ended context with nothing to read = %v, want context.Canceled", err)
	}
}

// Interrupt ends a reader's wait from another goroutine: the current wait,
// or the next one when it is not waiting; an event there to read comes
// first; two interrupts before the reader sees them are both told.
func TestEventLogInterrupt(t *testing.T) {
	l := newEventLog("s", 1024, time.Now, nil)
	sub, err := l.subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx := testkit.ContextFor(t, 10*time.Second)
	errA, errB := errors.New("a"), errors.New("b")

	// While it waits.
	inWait := make(chan struct{}, 1)
	hook := func(at *eventLog) {
		if at == l {
			select {
			case inWait <- struct{}{}:
			default:
			}
		}
	}
	testHookWait.Store(&hook)
	defer testHookWait.Store(nil)
	got := make(chan error, 1)
	go func() {
		_, err := sub.NextRef(ctx)
		got <- err
	}()
	select {
	case <-inWait:
	case <-ctx.Done():
		t.Fatal("the reader never waited")
	}
	testHookWait.Store(nil)
	sub.Interrupt(errA)
	if err := <-got; !errors.Is(err, errA) {
		t.Fatalf("an interrupted wait = %v, want %v", err, errA)
	}
	if waiting(l, sub) {
		t.Fatal("the interrupted reader is still among the log's waiting ones")
	}

	// Before it waits: the next wait ends at once, but an event there
	// is read first.
	sub.Interrupt(errA)
	l.publish(Event{Type: EventMessageUpdate, TextDelta: "x"})
	if e, err := sub.NextRef(ctx); err != nil || e.TextDelta != "x" {
		t.Fatalf("NextRef with an event and an interrupt pending = %+v, %v; want the event", e, err)
	}
	if _, err := sub.NextRef(ctx); !errors.Is(err, errA) {
		t.Fatalf("the wait after the event = %v, want %v", err, errA)
	}

	// Two before it looks: both told, once; the same one twice: once.
	sub.Interrupt(errA)
	sub.Interrupt(errB)
	sub.Interrupt(errA)
	if _, err := sub.NextRef(ctx); !errors.Is(err, errA) || !errors.Is(err, errB) || strings.Count(err.Error(), "a") != 1 {
		t.Fatalf("two interrupts = %v, want both once", err)
	}

	// Told, it waits for events again.
	go l.publish(Event{Type: EventAgentEnd})
	if e, err := sub.NextRef(ctx); err != nil || e.Type != EventAgentEnd {
		t.Fatalf("NextRef after the interrupts = %+v, %v", e, err)
	}
}

// A log whose copy of its events was let go (release) takes its arrays
// back from ringBufs as its next prompt's events come: a session prompted
// now and then allocates nothing for its log, prompt after prompt.
func TestEventLogReusesReleasedRings(t *testing.T) {
	l := newEventLog("s", DefaultEventBuffer, time.Now, nil)
	l.gated = true
	prompt := func() {
		for range 100 {
			e, _ := l.publish(Event{Type: EventMessageUpdate, TextDelta: "word"})
			l.stored(e.Seq)
		}
		if !l.release() {
			t.Fatal("the log did not let its events go")
		}
	}
	for range 3 {
		prompt()
	}
	if n := testing.AllocsPerRun(50, prompt); n > 0 && !testkit.Race {
		t.Errorf("%.1f allocations a prompt of 100 events after a release, want 0", n)
	}
	// What it gave back holds no event.
	r, box := takeRing(ringMin)
	if r = r[:cap(r)]; box != nil && r[0] != (heldEvent{}) {
		t.Errorf("a ring taken back holds %+v", r[0])
	}
	giveRing(r[:0], box)
}
