package sessionstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// writesCounter counts the writer's pipelines: those that PUBLISH a
// session's "events stored" notification.
type writesCounter struct{ n *atomic.Int64 }

func (writesCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (writesCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h writesCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "publish" {
				h.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

var _ redis.Hook = writesCounter{}

// The writer, woken by a batch's first event, lets the goroutines that are
// runnable already go first: an event one of them appends then rides the
// same round trip. On one processor a session's run is made runnable
// (another session's provider data in hand) while this one appends; the
// two events go out in one pipeline. Without the writer's yield it runs
// first and writes the first event alone, every time but where the race
// detector's scheduler shuffles the order (about half the rounds): the
// bound tells the two apart.
func TestWriterBatchesWhatIsRunnable(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	var writes atomic.Int64
	c.AddHook(writesCounter{&writes})
	s := newStore(t, c, Options{})
	ctx := testkit.Context(t)
	// Connections and scripts in place before counting.
	s.AppendEvent("a", event(1))
	s.AppendEvent("b", event(1))
	must(t, s.Flush(ctx, "a"))
	must(t, s.Flush(ctx, "b"))

	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	const rounds = 40
	one := 0
	for seq := uint64(2); seq < 2+rounds; seq++ {
		before := writes.Load()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.AppendEvent("b", event(seq))
		}()
		s.AppendEvent("a", event(seq))
		wg.Wait()
		must(t, s.Flush(ctx, "a"))
		must(t, s.Flush(ctx, "b"))
		if writes.Load()-before == 1 {
			one++
		}
	}
	runtime.GOMAXPROCS(prev)
	t.Logf("%d rounds of %d in one pipeline", one, rounds)
	if one < rounds*85/100 {
		t.Fatalf("the two sessions' events went out in one pipeline in %d rounds of %d, want at least %d", one, rounds, rounds*85/100)
	}
	for _, id := range []string{"a", "b"} {
		evs, err := s.Events(ctx, id, 0, 100)
		must(t, err)
		if len(evs) != rounds+1 || evs[len(evs)-1].Seq != rounds+1 {
			t.Fatalf("session %s: %d events stored, the last %v", id, len(evs), seqs(evs))
		}
	}
}

// BenchmarkWriter is the event writer's cost per event under load: 64
// sessions each append one event, and every batch of them is written in a
// pipeline to a real redis-server (the Redis store's per-chunk path).
// allocs/op and B/op are per event, agentd's and go-redis's together.
func BenchmarkWriter(b *testing.B) {
	srv := redistest.Start(b)
	s := newStore(b, newClient(b, srv.Addr(), 5*time.Second), Options{})
	ctx := context.Background()
	const sessions = 64
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("ses_%02d", i)
	}
	ev := event(1)
	seq := uint64(0)
	round := func() {
		seq++
		ev.Seq = seq
		for _, id := range ids {
			s.AppendEvent(id, ev)
		}
		for _, id := range ids {
			if err := s.Flush(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	}
	round() // connections and scripts in place
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		round()
	}
	b.StopTimer()
	n := float64(b.N * sessions)
	b.ReportMetric(b.Elapsed().Seconds()*1e9/n, "ns/event")
}

// fencedKeys are r.key's keys, made in two allocations (one string for
// all, and the slice).
func TestFencedKeys(t *testing.T) {
	r := &Redis{o: Options{KeyPrefix: "agentd:"}}
	got := r.fencedKeys("ses_1", "events", "history")
	want := []string{r.key("ses_1", "lease"), r.key("ses_1", "epoch"), r.key("ses_1", "meta"),
		r.key("ses_1", "events"), r.key("ses_1", "history")}
	if !slices.Equal(got, want) {
		t.Fatalf("fencedKeys = %q, want %q", got, want)
	}
	if got := r.fencedKeys("s"); !slices.Equal(got, []string{r.key("s", "lease"), r.key("s", "epoch"), r.key("s", "meta")}) {
		t.Fatalf("fencedKeys without kinds = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.fencedKeys("ses_1", "events") }); n > 2 {
		t.Errorf("fencedKeys: %v allocations, want at most 2", n)
	}
}

// The writer's grouping of a batch: each session's events under one lease
// together, sessions in order of their first event, split where the lease
// changes; a batch of the same shape again takes no allocation, and reset
// leaves nothing of the events reachable.
func TestWriteScratchGroup(t *testing.T) {
	it := func(id, epoch string, seq uint64) item {
		return item{id: id, epoch: epoch, e: event(seq)}
	}
	batch := []item{it("a", "1", 1), it("b", "1", 1), it("a", "1", 2), it("a", "2", 3), it("c", "1", 1), it("b", "1", 2)}
	var sc writeScratch
	got := func() [][]string {
		var out [][]string
		for _, ru := range sc.group(batch) {
			var s []string
			for _, i := range ru.items {
				s = append(s, fmt.Sprintf("%s/%s/%d", i.id, i.epoch, i.e.Seq))
			}
			out = append(out, s)
		}
		return out
	}()
	want := [][]string{{"a/1/1", "a/1/2"}, {"b/1/1", "b/1/2"}, {"a/2/3"}, {"c/1/1"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("group = %v, want %v", got, want)
	}
	for i, ru := range sc.runs {
		if cap(ru.items) != len(ru.items) {
			t.Errorf("run %d: cap %d beyond its %d items (an append would write into the next run's)", i, cap(ru.items), len(ru.items))
		}
	}
	sc.reset(len(batch))
	for i, x := range sc.items[:cap(sc.items)] {
		if x.id != "" || x.e.TextDelta != "" || x.e.ToolCall != nil {
			t.Fatalf("item %d still holds an event after reset: %+v", i, x)
		}
	}
	if n := testing.AllocsPerRun(50, func() {
		sc.group(batch)
		sc.reset(len(batch))
	}); n != 0 {
		t.Errorf("a batch of the same shape again: %v allocations, want 0", n)
	}
	// A burst's batch is let go of.
	big := make([]item, keptBatch+1)
	for i := range big {
		big[i] = it(fmt.Sprint("s", i), "1", 1)
	}
	sc.group(big)
	sc.reset(len(big))
	if sc.runs != nil || sc.items != nil || sc.byKey != nil {
		t.Error("the scratch of a batch beyond keptBatch is kept")
	}
}
