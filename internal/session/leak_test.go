package session_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A completed prompt leaves nothing behind: neither its run's context
// (attached to the manager's until cancelled) nor a goroutine. 10k prompts,
// each on a session deleted afterwards, may not grow the live heap by more
// than a generous margin (the run context a prompt once left behind, over 100 bytes, is 1 MB).
func TestCompletedPromptsRetainNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("10k prompts")
	}
	m := newManager(t, retry.DefaultSettings(), 0.5)
	ctx := context.Background()
	round := func(n int) {
		for range n {
			s, err := m.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
			if err != nil {
				t.Fatal(err)
			}
			if evs := prompt(t, m, s, "hi"); last(evs).Outcome != "completed" {
				t.Fatalf("prompt: %v", kinds(evs))
			}
			if err := m.Delete(ctx, "t", s.ID()); err != nil {
				t.Fatal(err)
			}
		}
	}
	round(500) // warm up: pools, maps and the scheduler reach their size
	// The engine's own goroutines (its runs' children among them); the
	// runtime's and the test framework's come and go. The goroutines kept
	// for the next runs (up to 64: runworkers.go) are shed before each
	// count, as the reclaimer sheds them when a load has gone.
	const engine = "github.com/agentd/agentd/internal/session."
	m.ShedIdleWorkers()
	goroutines := testkit.Goroutines(engine)
	before := liveHeap()
	round(10000)
	after := liveHeap()
	const margin = 256 << 10
	t.Logf("live heap %d -> %d bytes over 10k prompts", before, after)
	if after > before+margin {
		t.Errorf("live heap grew by %d bytes over 10k prompts (%.0f bytes a prompt); want at most %d in all",
			after-before, float64(after-before)/10000, margin)
	}
	// A run's last goroutines end right after its prompt_end: the count
	// must come back, not be back at once.
	testkit.EventuallyErr(t, "the runs' goroutines ended", func() error {
		m.ShedIdleWorkers()
		if n := testkit.Goroutines(engine); n > goroutines {
			return fmt.Errorf("%d engine goroutines after 10k prompts, %d before: a run left one behind", n, goroutines)
		}
		return nil
	})
}

// Deleted sessions leave nothing behind, followed or not: 10k sessions,
// each prompted and read by a reader that then left (so that the manager
// followed its stored log, and its poller looked at it), all deleted, are
// all collected, and the live heap comes back to within a generous margin
// of where it was (the maps that held them are copied smaller: Go's keep
// their buckets).
func TestDeletedSessionsRetainNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("10k sessions")
	}
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 0.5)
		ctx := t.Context()
		const n, perTenant = 10000, 900
		type made struct {
			id, tenant string
			s          weak.Pointer[session.Session]
		}
		// The test's own record of them, made first: its array, the
		// ids' strings (made by Create: counted below) and the weak
		// pointers' handles are its, not the manager's.
		all := make([]made, 0, n)
		tenants := make([]string, n/perTenant+1)
		for i := range tenants {
			tenants[i] = fmt.Sprint("t", i)
		}
		before := liveHeap()
		for i := range n {
			tenant := tenants[i/perTenant]
			s, err := m.Create(ctx, tenant, session.CreateParams{Model: "sim/echo"})
			if err != nil {
				t.Fatal(err)
			}
			if evs := prompt(t, m, s, "hi"); last(evs).Outcome != "completed" {
				t.Fatalf("prompt: %v", kinds(evs))
			}
			sub, err := s.Subscribe(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			sub.Close()
			all = append(all, made{s.ID(), tenant, weak.Make(s)})
			if i == n/2 {
				// The poller looks at the copies followed so far.
				time.Sleep(session.MirrorPoll)
				synctest.Wait()
			}
		}
		time.Sleep(session.MirrorPoll)
		synctest.Wait()
		for _, x := range all {
			if err := m.Delete(ctx, x.tenant, x.id); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(session.MirrorPoll)
		synctest.Wait()
		after := liveHeap()
		alive := 0
		for _, x := range all {
			if x.s.Value() != nil {
				alive++
			}
		}
		if alive > 0 {
			t.Errorf("%d of %d deleted sessions are still in memory", alive, n)
		}
		// Besides the margin, what the test holds: each id (its string,
		// at most 48 bytes) and its weak pointer's handle (16).
		margin := uint64(256<<10 + n*(48+16))
		t.Logf("live heap %d -> %d bytes after %d sessions were made and deleted", before, after, n)
		if after > before+margin {
			t.Errorf("live heap grew by %d bytes after %d sessions were made and deleted; want at most %d",
				after-before, n, margin)
		}
	})
}
