// Package testkit is the one home of what agentd's tests share below the
// in-process harness (internal/agentdtest): the bounds of their waits, a
// bounded poll, and a fake clock for the time that becomes data. It imports
// nothing of agentd, so that the internal tests of any package (server,
// session, the stores) can use it without an import cycle.
package testkit

import (
	"context"
	"testing"
	"time"
)

// The bounds of every wait in agentd's tests. A bound only decides how
// soon a broken test fails, never whether a working one passes: every wait
// ends on an event or a condition first. They are generous because the
// tests run with -race on loaded machines.
const (
	// Timeout bounds a test's calls and waits (Context, Eventually).
	Timeout = 60 * time.Second
	// StopTimeout bounds a server's drain when a test ends.
	StopTimeout = 30 * time.Second
	// PollEvery is how often Eventually checks its condition.
	PollEvery = 10 * time.Millisecond
)

// Context is a context that ends after Timeout or when the test's cleanup
// runs, so that a hanging call fails the test instead of the run. Its
// parent is not t.Context(): cleanups may still use it.
func Context(t testing.TB) context.Context {
	return ContextFor(t, Timeout)
}

// ContextFor is Context with a bound of d (for a test that checks a
// deadline of its own).
func ContextFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
