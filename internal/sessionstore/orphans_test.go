package sessionstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// Another replica keeps writing a session (history, stripped set, run
// state, events, lease) while it is removed, and for a while after: no key
// of the session is left without a TTL.
func TestWritesRacingRemoveLeaveNoKeyWithoutTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	remover := newStore(t, c, Options{})
	writer := newStore(t, c, Options{})
	ctx := testkit.Context(t)
	for round := range 10 {
		id := fmt.Sprintf("ses_orphan%d", round)
		if _, err := remover.Create(ctx, record(id, "acme"), 0); err != nil {
			t.Fatal(err)
		}
		var removed atomic.Bool
		var wrote atomic.Int64
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				seq := uint64(w * 1_000_000)
				after := 0
				for i := 0; after < 30; i++ {
					if removed.Load() {
						after++
					}
					seq++
					var err error
					switch i % 6 {
					case 0:
						_, err = writer.Append(ctx, id, session.Entry{Time: created})
					case 1:
						err = writer.Strip(ctx, id, int64(i))
					case 2:
						err = writer.SaveRun(ctx, id, session.Run{PromptID: "p1", Replica: writer.ReplicaID()})
					case 3:
						err = writer.Finish(ctx, id, session.Mutable{Model: "p/m1"}, session.Run{PromptID: "p1", Ending: true}, session.PromptSlot{})
					case 4:
						writer.AppendEvent(id, event(seq))
					case 5:
						_, _, err = writer.Acquire(ctx, id, time.Second)
					}
					if err != nil && !errors.Is(err, session.ErrFenced) {
						// Refused is fine: the lease Acquire took went
						// with the session, and nothing was written.
						t.Error(err)
						return
					}
					wrote.Add(1)
				}
			}()
		}
		testkit.Eventually(t, "the writers under way", func() bool { return wrote.Load() > 20 })
		must(t, remover.Remove(ctx, id, "acme"))
		removed.Store(true)
		wg.Wait()
		if err := writer.Flush(ctx, id); err != nil && !errors.Is(err, session.ErrFenced) && !errors.Is(err, session.ErrEventsLost) {
			t.Fatal(err)
		}

		keys, err := c.Keys(ctx, "t:{"+id+"}:*").Result()
		must(t, err)
		for _, k := range keys {
			ttl, err := c.PTTL(ctx, k).Result()
			must(t, err)
			if ttl < 0 {
				t.Errorf("round %d: %s has no TTL after the session's Remove", round, k)
			}
		}
		if ok, _ := c.HExists(ctx, "t:{"+id+"}:meta", "record").Result(); ok {
			t.Fatalf("round %d: the record is back", round)
		}
	}
}
