package session_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

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
	// runtime's and the test framework's come and go.
	const engine = "github.com/agentd/agentd/internal/session."
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
		if n := testkit.Goroutines(engine); n > goroutines {
			return fmt.Errorf("%d engine goroutines after 10k prompts, %d before: a run left one behind", n, goroutines)
		}
		return nil
	})
}
