package session_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// An idle session's events live in the store alone once its log's copy is
// released: a reader from the start gets every event as before, and the
// next prompt's events follow on.
func TestIdleLogReleasedServesFromTheStore(t *testing.T) {
	m := newManager(t, retry.DefaultSettings(), 0.5)
	s := create(t, m, session.RetryOverrides{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, sub, err := s.Prompt(ctx, "one two three")
	if err != nil {
		t.Fatal(err)
	}
	first := readUntilEnd(t, sub)
	sub.Close()

	session.ReleaseIdleLogs(m)
	all, err := s.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var replay []session.Event
	for range first {
		e, err := all.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		replay = append(replay, e)
	}
	if !reflect.DeepEqual(replay, first) {
		t.Errorf("replayed from the store:\n%+v\nwant\n%+v", replay, first)
	}
	// The next prompt's events come on the same subscription.
	_, sub2, err := s.Prompt(ctx, "four")
	if err != nil {
		t.Fatal(err)
	}
	second := readUntilEnd(t, sub2)
	sub2.Close()
	for _, want := range second {
		e, err := all.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != want.Seq || e.Type != want.Type {
			t.Fatalf("after the release: %d %s, want %d %s", e.Seq, e.Type, want.Seq, want.Type)
		}
	}
	all.Close()
	if second[0].Seq != first[len(first)-1].Seq+1 {
		t.Errorf("seqs after the release start at %d, want %d", second[0].Seq, first[len(first)-1].Seq+1)
	}
}
