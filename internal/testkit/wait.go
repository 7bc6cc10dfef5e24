package testkit

import (
	"context"
	"testing"
	"time"
)

// Eventually checks cond every PollEvery until it holds, and fails the test
// saying what did not happen when Timeout passes first. It is for state
// that announces no event (a count in another process, a goroutine's
// exit); where an event exists, wait on it instead.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyCtx(Context(t), t, PollEvery, what, func(context.Context) (bool, error) { return cond(), nil })
}

// EventuallyCtx checks cond every interval until it reports true, and
// fails the test with what and cond's last error when ctx ends first.
func EventuallyCtx(ctx context.Context, t testing.TB, every time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				t.Fatalf("%s: not so before the deadline (last error: %v)", what, last)
			}
			t.Fatalf("%s: not so before the deadline", what)
		case <-tick.C:
		}
	}
}

// EventuallyErr checks cond every PollEvery until it returns nil, and fails
// the test with what and cond's last error (which says how far from done
// it was) when Timeout passes first.
func EventuallyErr(t testing.TB, what string, cond func() error) {
	t.Helper()
	EventuallyCtx(Context(t), t, PollEvery, what, func(context.Context) (bool, error) {
		err := cond()
		return err == nil, err
	})
}
