package sessionstore

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// The conformance suite: every session.Shared implementation — the Redis
// store and the in-memory one — behaves the same for the session engine.
// Each test gets a function returning a new replica's store on one shared
// backend.

type replicaFactory func(t *testing.T) session.Shared

func forEachStore(t *testing.T, test func(t *testing.T, replica replicaFactory)) {
	t.Run("memory", func(t *testing.T) {
		b := session.NewMemoryStore(64)
		test(t, func(t *testing.T) session.Shared { return b.Replica("") })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		test(t, func(t *testing.T) session.Shared {
			return newStore(t, newClient(t, srv.Addr(), time.Second), Options{EventBuffer: 64})
		})
	})
}

// watched records what a store's event watch hears.
type watched struct {
	mu     sync.Mutex
	stored map[string]uint64
	lost   map[string]error
	ch     chan struct{}
}

func watch(st session.Shared) *watched {
	w := &watched{stored: map[string]uint64{}, lost: map[string]error{}, ch: make(chan struct{}, 100)}
	st.WatchEvents(session.EventWatch{
		Stored: func(id string, seq uint64) {
			w.mu.Lock()
			w.stored[id] = max(w.stored[id], seq)
			w.mu.Unlock()
			w.ch <- struct{}{}
		},
		Lost: func(id string, stored uint64, err error) {
			w.mu.Lock()
			w.stored[id] = max(w.stored[id], stored)
			w.lost[id] = err
			w.mu.Unlock()
			w.ch <- struct{}{}
		},
	})
	return w
}

func (w *watched) get(id string) (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stored[id], w.lost[id]
}

func TestConformanceRecords(t *testing.T) {
	forEachStore(t, func(t *testing.T, replica replicaFactory) {
		ctx := testkit.Context(t)
		a, b := replica(t), replica(t)
		r1 := record("ses_c1", "acme")
		res, err := a.Create(ctx, r1, 2)
		must(t, err)
		if !res.Created || res.Sessions != 1 {
			t.Fatalf("Create = %+v", res)
		}
		res2, err := b.Create(ctx, record("ses_c2", "acme"), 2)
		must(t, err)
		if res3, err := a.Create(ctx, record("ses_c3", "acme"), 2); err != nil || res3.Created || res3.Sessions != 2 {
			t.Fatalf("Create over the tenant's bound = %+v, %v", res3, err)
		}
		if res2.Order <= res.Order {
			t.Fatalf("orders %d then %d", res.Order, res2.Order)
		}
		got, ok, err := b.Load(ctx, "ses_c1")
		must(t, err)
		want := r1
		want.Order = res.Order
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("Load = %+v, %v; want %+v", got, ok, want)
		}
		mu := session.Mutable{Model: "q/m2", Settings: r1.Settings}
		must(t, b.Save(ctx, "ses_c1", mu))
		if got, _, _ := a.Load(ctx, "ses_c1"); got.Model != "q/m2" {
			t.Fatalf("after Save: %+v", got.Mutable)
		}
		list, err := a.ListRecords(ctx, "acme", res.Order, 10)
		must(t, err)
		if len(list) != 1 || list[0].ID != "ses_c2" {
			t.Fatalf("ListRecords after the first = %+v", list)
		}
		for i := range 3 {
			n, err := a.Append(ctx, "ses_c1", entry("m"+string(rune('0'+i))))
			must(t, err)
			if n != int64(i) {
				t.Fatalf("Append #%d → index %d", i, n)
			}
		}
		must(t, a.Strip(ctx, "ses_c1", 1))
		entries, total, err := b.List(ctx, "ses_c1", 1, 10)
		must(t, err)
		if total != 3 || len(entries) != 2 || entries[0].Index != 1 {
			t.Fatalf("List = %+v (%d)", entries, total)
		}
		if s, err := b.Stripped(ctx, "ses_c1"); err != nil || !reflect.DeepEqual(s, []int64{1}) {
			t.Fatalf("Stripped = %v, %v", s, err)
		}
		must(t, b.Remove(ctx, "ses_c1", "acme"))
		if _, ok, _ := a.Load(ctx, "ses_c1"); ok {
			t.Fatal("Load after Remove found the session")
		}
		if res, err := a.Create(ctx, record("ses_c4", "acme"), 2); err != nil || !res.Created {
			t.Fatalf("Create after a Remove freed a place = %+v, %v", res, err)
		}
	})
}

// Leases, their epochs and the fencing of every write of a prompt.
func TestConformanceFencing(t *testing.T) {
	forEachStore(t, func(t *testing.T, replica replicaFactory) {
		ctx := testkit.Context(t)
		a, b := replica(t), replica(t)
		wa := watch(a)
		const id = "ses_f1"
		_, err := a.Create(ctx, record(id, "acme"), 0)
		must(t, err)
		const ttl = 200 * time.Millisecond
		first := entry("hello")
		res, err := a.Start(ctx, id, ttl, session.Run{PromptID: "p1", Replica: a.ReplicaID()}, &first, session.PromptSlot{Tenant: "acme", PromptID: "p1"}, 1)
		must(t, err)
		if !res.Started || res.Epoch == 0 || res.Record.MessageCount != 0 {
			t.Fatalf("Start = %+v", res)
		}
		if r, err := b.Start(ctx, id, ttl, session.Run{PromptID: "p2"}, nil, session.PromptSlot{}, 0); err != nil || r.Started || r.Holder != a.ReplicaID() {
			t.Fatalf("a second Start = %+v, %v", r, err)
		}
		for seq := uint64(1); seq <= 3; seq++ {
			a.AppendEvent(id, event(seq))
		}
		must(t, a.Flush(ctx, id))
		testkit.Eventually(t, "events stored", func() bool { n, _ := wa.get(id); return n == 3 })
		if ok, err := a.Renew(ctx, id, ttl, session.PromptSlot{}); !ok || err != nil {
			t.Fatalf("Renew = %v, %v", ok, err)
		}

		// A's lease expires (A cut off, say) and B takes the prompt over.
		testkit.Eventually(t, "the lease expired", func() bool { h, _ := b.Holder(ctx, id); return h == "" })
		if ok, _, err := b.Acquire(ctx, id, time.Minute); !ok || err != nil {
			t.Fatalf("B's Acquire = %v, %v", ok, err)
		}
		// Every write of A's prompt is refused, and nothing of it stored.
		for name, write := range map[string]func() error{
			"SaveRun": func() error {
				return a.SaveRun(ctx, id, session.Run{PromptID: "p1", Replica: a.ReplicaID(), Attempt: 9})
			},
			"Append": func() error { _, err := a.Append(ctx, id, entry("late")); return err },
			"Strip":  func() error { return a.Strip(ctx, id, 0) },
			"Save":   func() error { return a.Save(ctx, id, session.Mutable{Model: "late/m"}) },
			"Finish": func() error {
				return a.Finish(ctx, id, session.Mutable{Model: "late/m"}, session.Run{PromptID: "p1", Ending: true}, session.PromptSlot{})
			},
		} {
			if err := write(); !errors.Is(err, session.ErrFenced) {
				t.Errorf("A's %s after the takeover = %v, want ErrFenced", name, err)
			}
		}
		a.AppendEvent(id, event(4))
		_ = a.Flush(ctx, id)
		testkit.Eventually(t, "A told its events are lost", func() bool { _, err := wa.get(id); return err != nil })
		if _, err := wa.get(id); !errors.Is(err, session.ErrFenced) {
			t.Fatalf("A's watch: %v, want ErrFenced", err)
		}
		rec, _, err := b.Load(ctx, id)
		must(t, err)
		if rec.MessageCount != 1 || rec.LastSeq != 3 || rec.Model != "p/m1" {
			t.Fatalf("after A's refused writes: %d entries, last seq %d, model %s", rec.MessageCount, rec.LastSeq, rec.Model)
		}
		if run, _, _ := b.LoadRun(ctx, id); run.Attempt != 0 || run.Ending {
			t.Fatalf("A's run state written: %+v", run)
		}
		// A's Release and EndRun leave B's lease alone; B's writes work.
		must(t, a.Release(ctx, id))
		must(t, a.EndRun(ctx, id, session.PromptSlot{}))
		if h, _ := b.Holder(ctx, id); h != b.ReplicaID() {
			t.Fatalf("holder after A let go = %q", h)
		}
		wb := watch(b)
		b.AppendEvent(id, event(4))
		must(t, b.Flush(ctx, id))
		testkit.Eventually(t, "B's event stored", func() bool { n, _ := wb.get(id); return n == 4 })
		if _, err := b.Append(ctx, id, entry("b")); err != nil {
			t.Fatal(err)
		}
		must(t, b.EndRun(ctx, id, session.PromptSlot{}))
		if ids, _ := b.Running(ctx); len(ids) != 0 {
			t.Fatalf("running after B's EndRun: %v", ids)
		}
	})
}

// A fenced stream takes only the event after its newest one: a gap (events
// a failover lost) is reported, not written.
func TestConformanceEventGap(t *testing.T) {
	forEachStore(t, func(t *testing.T, replica replicaFactory) {
		ctx := testkit.Context(t)
		a := replica(t)
		w := watch(a)
		const id = "ses_g1"
		_, err := a.Create(ctx, record(id, "acme"), 0)
		must(t, err)
		if res, err := a.Start(ctx, id, time.Minute, session.Run{PromptID: "p1"}, nil, session.PromptSlot{}, 0); err != nil || !res.Started {
			t.Fatalf("Start = %+v, %v", res, err)
		}
		a.AppendEvent(id, event(1))
		a.AppendEvent(id, event(2))
		a.AppendEvent(id, event(2)) // again: skipped
		a.AppendEvent(id, event(4))
		_ = a.Flush(ctx, id)
		testkit.Eventually(t, "the gap reported", func() bool { _, err := w.get(id); return err != nil })
		if n, err := w.get(id); n != 2 || !errors.Is(err, session.ErrEventsLost) {
			t.Fatalf("watch: stored %d, %v", n, err)
		}
		evs, err := a.Events(ctx, id, 0, 10)
		must(t, err)
		if got := seqs(evs); !reflect.DeepEqual(got, []uint64{1, 2}) {
			t.Fatalf("stored seqs %v", got)
		}
	})
}

// Control calls reach the replica that serves them.
func TestConformanceControl(t *testing.T) {
	forEachStore(t, func(t *testing.T, replica replicaFactory) {
		ctx := testkit.Context(t)
		a, b := replica(t), replica(t)
		b.Serve(func(_ context.Context, c session.Control) session.Reply {
			return session.Reply{Msg: string(c.Op) + " " + c.SessionID}
		})
		rep, err := a.Call(ctx, b.ReplicaID(), session.Control{Op: session.OpState, SessionID: "ses_x"})
		if err != nil || rep.Msg != "state ses_x" {
			t.Fatalf("Call = %+v, %v", rep, err)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := a.Call(cctx, "rep_nobody", session.Control{Op: session.OpState}); !errors.Is(err, session.ErrNoReplica) {
			t.Fatalf("Call to no replica = %v", err)
		}
	})
}

func entry(text string) session.Entry {
	e := session.Entry{Time: created, PromptID: "p1"}
	e.Message.Role = "user"
	e.Message.Content = append(e.Message.Content, textBlock(text))
	return e
}

func textBlock(text string) provider.Block {
	return provider.Block{Type: provider.BlockText, Text: text}
}
