package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
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
