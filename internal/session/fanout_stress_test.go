package session_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// Many readers of one session, prompted again and again with bursts of
// events: every reader gets every prompt's prompt_end (a reader that
// missed a wake-up would wait for ever).
func TestManyReadersGetEveryPrompt(t *testing.T) {
	m := newManager(t, retry.DefaultSettings(), 0.5)
	s, err := m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	const readers, prompts = 100, 30
	ctx := testkit.Context(t)
	var (
		mu     sync.Mutex
		cond   = sync.NewCond(&mu)
		ends   = make([]int, readers)
		lowest = func() int {
			lo := prompts
			for _, n := range ends {
				lo = min(lo, n)
			}
			return lo
		}
		wg sync.WaitGroup
	)
	rctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for i := range readers {
		sub, err := s.Subscribe(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			for {
				e, err := sub.NextRef(rctx)
				if err != nil {
					return
				}
				if e.Type == session.EventPromptEnd {
					mu.Lock()
					ends[i]++
					cond.Broadcast()
					mu.Unlock()
				}
			}
		}()
	}
	text := strings.TrimSpace(strings.Repeat("word ", 40))
	for p := 1; p <= prompts; p++ {
		_, sub, err := s.Prompt(ctx, text)
		if err != nil {
			t.Fatal(err)
		}
		sub.Close()
		done := context.AfterFunc(ctx, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
		mu.Lock()
		for lowest() < p && ctx.Err() == nil {
			cond.Wait()
		}
		lo := lowest()
		var behind []int
		for r, n := range ends {
			if n < p {
				behind = append(behind, r)
			}
		}
		mu.Unlock()
		done()
		if lo < p {
			t.Fatalf("prompt %d: readers %v still wait for its prompt_end", p, behind)
		}
	}
}
