package session_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// chainCounter counts the retry chains' outcomes the Observer hears.
type chainCounter struct {
	session.NopObserver
	mu sync.Mutex
	n  map[session.ChainOutcome]int
}

func (c *chainCounter) ChainEnded(outcome session.ChainOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[session.ChainOutcome]int{}
	}
	c.n[outcome]++
}

func (c *chainCounter) counts() map[session.ChainOutcome]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[session.ChainOutcome]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// A retry waiting in backoff ended by something other than the user says
// so, in auto_retry_end and prompt_end, and counts as interrupted; only
// AbortRetry and Abort are "Retry cancelled".
func TestRetryInBackoffEndedByItsCause(t *testing.T) {
	for _, tc := range []struct {
		name                string
		stop                func(t *testing.T, m *session.Manager, s *session.Session)
		finalError, promErr string
		outcome             session.ChainOutcome
	}{
		{"abort_retry", func(t *testing.T, m *session.Manager, s *session.Session) {
			if err := s.AbortRetry(t.Context()); err != nil {
				t.Fatal(err)
			}
		}, "Retry cancelled", "Retry cancelled", session.ChainCancelled},
		{"abort", func(t *testing.T, m *session.Manager, s *session.Session) {
			if err := s.Abort(t.Context()); err != nil {
				t.Fatal(err)
			}
		}, "Retry cancelled", "Retry cancelled", session.ChainCancelled},
		{"delete", func(t *testing.T, m *session.Manager, s *session.Session) {
			if err := m.Delete(t.Context(), "t", s.ID()); err != nil {
				t.Fatal(err)
			}
		}, "session deleted", "session deleted", session.ChainInterrupted},
		{"close", func(t *testing.T, m *session.Manager, s *session.Session) {
			if err := m.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
		}, "server shutting down", "server shutting down", session.ChainInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				obs := &chainCounter{}
				m := session.NewManager(session.Options{
					Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"},
						Client: simValidator{sim.New(sim.Options{})}}},
					Retry:    retry.DefaultSettings(),
					Rand:     func() float64 { return 1 },
					Observer: obs,
				})
				defer m.Close(context.Background())
				s := create(t, m, session.RetryOverrides{})
				_, sub, err := s.Prompt(context.Background(), "[[faults: 429:retry-after=30,ok]]")
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
				waitFor(t, sub, session.EventAutoRetryStart)
				synctest.Wait() // the run is asleep in the backoff
				tc.stop(t, m, s)
				evs := readUntilEnd(t, sub)
				if got := kinds(evs); got != "auto_retry_end,prompt_end" {
					t.Fatalf("events after the stop = %s", got)
				}
				if e := evs[0]; e.Success || e.FinalError != tc.finalError || e.Attempt != 1 {
					t.Fatalf("auto_retry_end = %+v, want finalError %q", e, tc.finalError)
				}
				if pe := last(evs); pe.Outcome != session.OutcomeAborted || pe.Error != tc.promErr {
					t.Fatalf("prompt_end = %+v, want error %q", pe, tc.promErr)
				}
				synctest.Wait()
				if got := obs.counts(); len(got) != 1 || got[tc.outcome] != 1 {
					t.Fatalf("chain outcomes = %v, want one %s", got, tc.outcome)
				}
			})
		})
	}
}

// A retried call in flight when the session is deleted: the chain ends with
// "session deleted", interrupted; the prompt_end says the session was deleted.
func TestRetriedCallStoppedByDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &chainCounter{}
		m := session.NewManager(session.Options{
			Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"},
				Client: simValidator{sim.New(sim.Options{})}}},
			Retry:    retry.DefaultSettings(),
			Rand:     func() float64 { return 1 },
			Observer: obs,
		})
		defer m.Close(context.Background())
		s := create(t, m, session.RetryOverrides{})
		_, sub, err := s.Prompt(context.Background(), "[[faults: 529,500:delay=1000,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		waitFor(t, sub, session.EventAutoRetryStart)
		waitFor(t, sub, session.EventMessageStart) // the retried call is in flight
		if err := m.Delete(t.Context(), "t", s.ID()); err != nil {
			t.Fatal(err)
		}
		evs := readUntilEnd(t, sub)
		end := only(evs, session.EventAutoRetryEnd)
		if len(end) != 1 || end[0].FinalError != "session deleted" {
			t.Fatalf("events = %s, auto_retry_end %+v", kinds(evs), end)
		}
		if pe := last(evs); pe.Outcome != session.OutcomeAborted || pe.Error != "session deleted" {
			t.Fatalf("prompt_end = %+v", pe)
		}
		if got := obs.counts(); len(got) != 1 || got[session.ChainInterrupted] != 1 {
			t.Fatalf("chain outcomes = %v", got)
		}
	})
}

// chainAndTakeovers hears both the chains' outcomes and the takeovers.
type chainAndTakeovers struct {
	chainCounter
	lost chan struct{}
	once sync.Once
}

func (c *chainAndTakeovers) Takeover(outcome string) {
	if outcome == session.TakeoverLeaseLost {
		c.once.Do(func() { close(c.lost) })
	}
}

// A replica cut off from the store while its prompt waits in backoff stops
// its part when its lease is lost, without a word more (it ends no chain,
// no prompt): its reader is told where to resume, and the replica that
// takes the prompt over runs the retry at its due time.
func TestReplicaLeaseLostInBackoff(t *testing.T) {
	srv := redistest.Start(t)
	obs := &chainAndTakeovers{lost: make(chan struct{})}
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second, func(o *session.Options) {
		o.Observer = obs
	})
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second)
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	_, onA, err := s.Prompt(t.Context(), "[[faults: 503:retry-after=2,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()
	before := until(t, onA, session.EventAutoRetryStart)
	a.lose()
	seen, resume := untilResume(t, onA)
	seen = append(before, seen...)
	if resume.After != seen[len(seen)-1].Seq {
		t.Fatalf("resume after %d; A's reader saw up to %d (%v)", resume.After, seen[len(seen)-1].Seq, kinds(seen))
	}
	<-obs.lost
	if got := obs.counts(); len(got) != 0 {
		t.Fatalf("A ended chains: %v", got)
	}
	onB, err := get(t, b.m, s.ID()).Subscribe(t.Context(), resume.After)
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Close()
	evs := until(t, onB, session.EventPromptEnd)
	if ends := only(evs, session.EventAutoRetryEnd); len(ends) != 1 || !ends[0].Success || last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("resumed on B: %v", kinds(evs))
	}
	checkLog(t, b.store, s.ID(), seen, evs)
}
