package app

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/agentd/agentd/internal/session"
)

// After a load has passed (a burst of sessions deleted, a spike of
// streams ended, its clients' connections closed), the Go heap shrinks but
// the process keeps its pages: the runtime's background scavenger gives
// them back slowly (minutes for a gigabyte), and a forced GC gives back
// none. The reclaimer watches the heap's free pages and, when they are
// many and more than the live heap, or when the load (sessions, readers
// and connections) fell to half its peak, returns them at once
// (debug.FreeOSMemory), so that RSS follows the live sessions instead of
// the peak. A load that halved also sheds the idle connections to the
// providers that its prompts opened (one per concurrent stream over
// HTTP/1.1: each an idle connection's buffers and two goroutines, about
// 28 KiB, that the transport keeps for 90 s): the next prompts dial anew.
// It ends the goroutines the session engine keeps for the next runs as
// well (up to 64, 32 KiB of stack each).
// Under a steady load the free pages stay below the live heap (the
// collector reuses them) and the load does not halve, so it does not fire.
const (
	reclaimEvery   = 5 * time.Second
	reclaimMinFree = 64 << 20
)

var reclaimSamples = []string{"/memory/classes/heap/free:bytes", "/memory/classes/heap/objects:bytes"}

// heapPages reads the heap's free (not yet returned) and in-use bytes.
func heapPages() (free, live uint64) {
	s := []metrics.Sample{{Name: reclaimSamples[0]}, {Name: reclaimSamples[1]}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// shouldReclaim reports whether free pages are worth returning now.
func shouldReclaim(free, live uint64) bool {
	return free >= reclaimMinFree && free > live
}

// loadDropped reports whether the load (sessions, readers, connections)
// fell to half its peak since the last release, by reclaimMinLoad at
// least: the heap holds their garbage, which no collection has found yet
// (nothing allocates once a load has passed).
func loadDropped(load, peak int) bool {
	return peak-load >= reclaimMinLoad && load <= peak/2
}

// reclaimMinLoad is the drop in sessions, readers and connections worth a
// release.
const reclaimMinLoad = 1000

// reclaimMemory checks every interval until ctx is done; read, load and
// release are heapPages, the load and debug.FreeOSMemory (a collection,
// then every free page returned); shed, run before release when the load
// halved, closes the idle provider connections, and the check after it
// releases again (what the closed connections freed as they ended).
func reclaimMemory(ctx context.Context, every time.Duration, read func() (free, live uint64), load func() int, shed, release func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	peak := load()
	// again: the last check shed connections; their goroutines end and
	// free their buffers after that release, so the next check releases
	// once more.
	again := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := load()
		peak = max(peak, n)
		dropped := loadDropped(n, peak)
		if dropped {
			shed()
		}
		if dropped || again || shouldReclaim(read()) {
			release()
			peak = n
		}
		again = dropped
	}
}

// startReclaimer runs reclaimMemory until stop is called; shed closes the
// providers' idle connections.
func startReclaimer(load func() int, shed func()) (stop func()) {
	return runBackground(func(ctx context.Context) {
		reclaimMemory(ctx, reclaimEvery, heapPages, load, shed, debug.FreeOSMemory)
	})
}

// runBackground runs f on a goroutine of its own until stop is called,
// which cancels f's context and waits for f to return.
func runBackground(f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	return func() { cancel(); <-done }
}

// idleCloser is a provider client that keeps connections (every HTTP one).
type idleCloser interface{ CloseIdleConnections() }

// closeIdleConnections closes the idle connections of every provider's
// client; the ones in use stay.
func closeIdleConnections(providers []session.Provider) {
	for _, p := range providers {
		if c, ok := p.Client.(idleCloser); ok {
			c.CloseIdleConnections()
		}
	}
}
