package sessionstore

import (
	"context"
	"runtime"
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
