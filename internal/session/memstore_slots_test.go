package session_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/session"
)

// The in-process store's prompt slots, on the bubble's clock: a slot counts
// until its prompt ends or its expiry; renewals keep it; a lost replica's
// slots (never renewed) stop counting at their expiry, each at its own,
// while the tenant has many live ones; a tenant at its limit is refused
// until one does; a tenant whose prompts all ended holds nothing.
func TestMemoryStorePromptSlotsExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		st := session.NewMemoryStore(0)
		a, lost := st.Replica("a"), st.Replica("lost")
		slot := func(p string) session.PromptSlot { return session.PromptSlot{Tenant: "acme", PromptID: p} }
		for i := range 51 {
			if _, err := a.Create(ctx, session.Record{ID: fmt.Sprint("ses_", i), Tenant: "acme"}, 0); err != nil {
				t.Fatal(err)
			}
		}
		start := func(i, limit int) session.StartResult {
			t.Helper()
			p := fmt.Sprint("p", i)
			res, err := a.Start(ctx, fmt.Sprint("ses_", i), time.Minute, session.Run{PromptID: p, Replica: "a"}, nil, slot(p), limit)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		for i := range 50 {
			if res := start(i, 0); !res.Started {
				t.Fatalf("Start %d = %+v", i, res)
			}
		}
		for p, ttl := range map[string]time.Duration{"lost-30s": 30 * time.Second, "lost-90s": 90 * time.Second} {
			if err := lost.Occupy(ctx, slot(p), ttl); err != nil {
				t.Fatal(err)
			}
		}
		if n := session.StorePrompts(st, "acme"); n != 52 {
			t.Fatalf("prompts = %d, want 52", n)
		}
		if res := start(50, 52); !res.Limited || res.Prompts != 52 {
			t.Fatalf("Start at the limit = %+v", res)
		}
		// Every 20 s the live prompts are renewed for a minute.
		for step, want := range []int{52, 51, 51, 51, 50, 50} { // after 20, 40, … 120 s
			time.Sleep(20 * time.Second)
			for i := range 50 {
				if ok, err := a.Renew(ctx, fmt.Sprint("ses_", i), time.Minute, slot(fmt.Sprint("p", i))); !ok || err != nil {
					t.Fatalf("Renew %d = %v, %v", i, ok, err)
				}
			}
			if n := session.StorePrompts(st, "acme"); n != want {
				t.Fatalf("after %d s: prompts = %d, want %d", 20*(step+1), n, want)
			}
		}
		// The lost replica's slots are gone: the 51st prompt fits under 51.
		if res := start(50, 51); !res.Started {
			t.Fatalf("Start after the lost slots expired = %+v", res)
		}
		for i := range 51 {
			if err := a.EndRun(ctx, fmt.Sprint("ses_", i), slot(fmt.Sprint("p", i))); err != nil {
				t.Fatal(err)
			}
		}
		if n := session.StorePrompts(st, "acme"); n != 0 {
			t.Fatalf("prompts after every EndRun = %d", n)
		}
	})
}

// A prompt's start and end on the in-process store while its tenant has
// many prompts running: the cost of one start does not grow with them.
func BenchmarkMemoryStoreStartWithPromptsRunning(b *testing.B) {
	for _, running := range []int{10, 1000} {
		b.Run(fmt.Sprint(running, "-running"), func(b *testing.B) {
			ctx := b.Context()
			st := session.NewMemoryStore(0)
			r := st.Replica("a")
			slot := func(p string) session.PromptSlot { return session.PromptSlot{Tenant: "acme", PromptID: p} }
			for i := range running + 1 {
				if _, err := r.Create(ctx, session.Record{ID: fmt.Sprint("ses_", i), Tenant: "acme"}, 0); err != nil {
					b.Fatal(err)
				}
			}
			for i := range running {
				p := fmt.Sprint("p", i)
				if _, err := r.Start(ctx, fmt.Sprint("ses_", i), time.Minute, session.Run{PromptID: p, Replica: "a"}, nil, slot(p), 0); err != nil {
					b.Fatal(err)
				}
			}
			id := fmt.Sprint("ses_", running)
			for b.Loop() {
				res, err := r.Start(ctx, id, time.Minute, session.Run{PromptID: "p", Replica: "a"}, nil, slot("p"), running+1)
				if err != nil || !res.Started {
					b.Fatal(res, err)
				}
				if err := r.EndRun(ctx, id, slot("p")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
