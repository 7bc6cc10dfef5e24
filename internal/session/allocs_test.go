package session_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// Guard rails of the per-prompt and per-chunk paths, in allocations (which
// do not depend on the machine, unlike times): a prompt on the simulated
// provider, its events read by one subscriber, from Prompt to prompt_end.
// The bounds are today's counts with some room; a change that adds work on
// every prompt or every chunk fails here first (see BENCHMARKS.md for what
// each costs).
func TestAllocationsPerPromptAndChunk(t *testing.T) {
	m := newManager(t, retry.DefaultSettings(), 0.5)
	ctx := context.Background()
	// Each run creates a session and prompts it once: the prompt's own
	// path plus a session's creation, as REST clients do.
	run := func(tokens int) func() {
		text := fmt.Sprintf("hi [[tokens: %d]]", tokens)
		return func() {
			s, err := m.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
			if err != nil {
				t.Fatal(err)
			}
			_, sub, err := s.Prompt(ctx, text)
			if err != nil {
				t.Fatal(err)
			}
			readToPromptEnd(t, sub)
			sub.Close()
		}
	}
	for range 50 {
		run(10)()
	}
	short := testing.AllocsPerRun(200, run(10))
	long := testing.AllocsPerRun(200, run(110))
	perChunk := (long - short) / 100
	t.Logf("allocations: %.0f a session and prompt of 10 chunks, %.1f a chunk", short, perChunk)
	// Measured: 80 a session and prompt (94 with -race; 85 before IDs were
	// made in one allocation), 1.1 a chunk, of which 1 is the simulated
	// provider's own word. Of the prompt's, about
	// 20 are the store's part since local mode runs on a MemoryStore like
	// any other (its record, run, lease renewal and stored events; 66
	// before).
	const maxPerPrompt, maxPerChunk = 110, 1.5
	if short > maxPerPrompt {
		t.Errorf("%.0f allocations a prompt, want at most %d", short, maxPerPrompt)
	}
	if perChunk > maxPerChunk {
		t.Errorf("%.1f allocations a chunk, want at most %.1f", perChunk, maxPerChunk)
	}
}

// BenchmarkPromptChunk is the in-process cost of one relayed chunk: a
// prompt of 210 simulated chunks less one of 10, each on a session of its
// own, read to its end by one reader (ns/chunk). Run, for example:
//
//	go test -run '^$' -bench PromptChunk -count 6 ./internal/session/
func BenchmarkPromptChunk(b *testing.B) {
	m := newManager(b, retry.DefaultSettings(), 0.5)
	ctx := context.Background()
	prompt := func(tokens int) time.Duration {
		s, err := m.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		_, sub, err := s.Prompt(ctx, fmt.Sprintf("hi [[tokens: %d]]", tokens))
		if err != nil {
			b.Fatal(err)
		}
		readToPromptEnd(b, sub)
		d := time.Since(start)
		sub.Close()
		if err := m.Delete(ctx, "t", s.ID()); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var short, long time.Duration
	b.ReportAllocs()
	for b.Loop() {
		short += prompt(10)
		long += prompt(210)
	}
	b.ReportMetric(float64((long-short).Nanoseconds())/float64(b.N)/200, "ns/chunk")
}

// readToPromptEnd reads sub's events up to its prompt_end.
func readToPromptEnd(tb testing.TB, sub *session.Subscription) {
	tb.Helper()
	for {
		e, err := sub.NextRef(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		if e.Type == session.EventPromptEnd {
			return
		}
	}
}
