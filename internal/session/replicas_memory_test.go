package session_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// Replica behaviour on the in-memory shared store, under testing/synctest:
// leases, renewals, the janitor and backoffs run on the bubble's clock, so
// a 30 s backoff and a lost lease take no wall time, and nothing is polled.

// memReplica is a session manager on st.
func memReplica(t *testing.T, st session.Shared, lease time.Duration) *session.Manager {
	return session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo"},
			Client: simValidator{sim.New(sim.Options{})}}},
		Retry:    retry.DefaultSettings(),
		Shared:   st,
		LeaseTTL: lease,
		Rand:     func() float64 { return 0.5 },
	})
}

func closeAll(t *testing.T, ms ...*session.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range ms {
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
}

// A replica cut off from the store while its prompt waits out a 30 s
// backoff: once its lease is lost its reader is told where to resume; the
// other replica takes the prompt over when the lease expires and runs the
// retry at its due time, exactly once; the log is one.
func TestMemoryReplicasTakeOverRetryOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := session.NewMemoryStore(512)
		stA, stB := b.Replica("rep_a"), b.Replica("rep_b")
		const lease = 2 * time.Second
		a, bm := memReplica(t, stA, lease), memReplica(t, stB, lease)
		defer closeAll(t, a, bm)
		ctx := t.Context()
		s, err := a.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		_, onA, err := s.Prompt(ctx, "[[faults: 503:retry-after=30,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer onA.Close()
		before := until(t, onA, session.EventAutoRetryStart)
		retryStart := last(before)
		stA.Cut()
		cut := time.Now()
		seen, resume := untilResume(t, onA)
		seen = append(before, seen...)
		if lost := time.Since(cut); lost < lease || lost > 2*lease {
			t.Errorf("A gave the prompt up %v after it was cut off (lease %v)", lost, lease)
		}
		if resume.After != retryStart.Seq {
			t.Fatalf("resume after %d, want %d (auto_retry_start)", resume.After, retryStart.Seq)
		}
		onB, err := get(t, bm, s.ID()).Subscribe(ctx, resume.After)
		if err != nil {
			t.Fatal(err)
		}
		defer onB.Close()
		evs := untilWithin(t, onB, session.EventPromptEnd, time.Minute)
		ends := only(evs, session.EventAutoRetryEnd)
		if len(ends) != 1 || !ends[0].Success || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("on B: %v", kinds(evs))
		}
		if d := ends[0].Time.Sub(retryStart.Time); d < 30*time.Second || d > 31*time.Second {
			t.Errorf("the retry ran %v after it was scheduled, want its 30 s", d)
		}
		checkLog(t, stB, s.ID(), seen, evs)
		stA.Reconnect()
	})
}

// Two replicas prompt the same session at once: exactly one runs it, the
// other is refused as busy; after prompt_end either takes the next one.
func TestMemoryReplicasOnePromptAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := session.NewMemoryStore(512)
		a, bm := memReplica(t, b.Replica("rep_a"), time.Second), memReplica(t, b.Replica("rep_b"), time.Second)
		defer closeAll(t, a, bm)
		ctx := t.Context()
		s, err := a.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		// A's answer waits 100 ms (of the bubble's clock) before it
		// streams: B's prompt comes while A holds the lease, however the
		// goroutines are scheduled.
		_, subA, errA := s.Prompt(ctx, "one [[tokens: 50]] [[faults: ok:delay=100]]")
		_, _, errB := get(t, bm, s.ID()).Prompt(ctx, "two")
		if errA != nil || errB == nil {
			t.Fatalf("two prompts at once: %v, %v", errA, errB)
		}
		evs := until(t, subA, session.EventPromptEnd)
		subA.Close()
		_, subB, err := get(t, bm, s.ID()).Prompt(ctx, "three")
		if err != nil {
			t.Fatal(err)
		}
		evs2 := until(t, subB, session.EventPromptEnd)
		subB.Close()
		if last(evs).Outcome != session.OutcomeCompleted || last(evs2).Outcome != session.OutcomeCompleted {
			t.Fatalf("outcomes %s, %s", last(evs).Outcome, last(evs2).Outcome)
		}
	})
}

// untilWithin reads events until one of type typ, waiting at most d (on
// the bubble's clock).
func untilWithin(t *testing.T, sub *session.Subscription, typ string, d time.Duration) []session.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var evs []session.Event
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v, after %v", err, kinds(evs))
		}
		evs = append(evs, e)
		if e.Type == typ {
			return evs
		}
	}
}

// A prompt's usage survives its takeover: a tool loop's first call on A,
// then a retry in backoff when A is cut off; B resumes it, and prompt_end
// counts both replicas' calls (what every message_end of the prompt says).
func TestMemoryReplicasTakeOverKeepsPromptUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := session.NewMemoryStore(512)
		stA, stB := b.Replica("rep_a"), b.Replica("rep_b")
		const lease = 2 * time.Second
		a, bm := memReplica(t, stA, lease), memReplica(t, stB, lease)
		defer closeAll(t, a, bm)
		ctx := t.Context()
		s, err := a.Create(ctx, "t", session.CreateParams{Model: "sim/echo",
			Tools: []provider.Tool{{Name: "t", Description: "test tool", InputSchema: []byte(`{"type":"object"}`)}}})
		if err != nil {
			t.Fatal(err)
		}
		_, onA, err := s.Prompt(ctx, "x [[tools: t]] [[faults: ok,503:retry-after=30,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer onA.Close()
		seen := until(t, onA, session.EventToolCall)
		call := last(seen).ToolCall
		if err := s.SubmitToolResults(ctx, []session.ToolResult{{CallID: call.CallID, Content: "done"}}); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, until(t, onA, session.EventAutoRetryStart)...)
		stA.Cut()
		more, resume := untilResume(t, onA)
		seen = append(seen, more...)
		onB, err := get(t, bm, s.ID()).Subscribe(ctx, resume.After)
		if err != nil {
			t.Fatal(err)
		}
		defer onB.Close()
		seen = append(seen, untilWithin(t, onB, session.EventPromptEnd, time.Minute)...)
		var want provider.Usage
		for _, e := range only(seen, session.EventMessageEnd) {
			if e.Usage != nil {
				want.Add(*e.Usage)
			}
		}
		end := last(seen)
		if end.Outcome != session.OutcomeCompleted || end.Usage == nil || want.InputTokens == 0 || *end.Usage != want {
			t.Fatalf("prompt_end %s usage %+v, want the sum of its calls' %+v", end.Outcome, end.Usage, want)
		}
		stA.Reconnect()
	})
}

// Where a session's prompt cache is travels with its record: a replica
// that takes the session over knows whether a switch loses the cache.
func TestMemoryReplicasWarmCacheTravels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := session.NewMemoryStore(512)
		stA := b.Replica("rep_a")
		a := memReplica(t, stA, time.Second)
		defer closeAll(t, a)
		ctx := t.Context()
		s, err := a.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		_, sub, err := s.Prompt(ctx, "a prompt long enough to be cached")
		if err != nil {
			t.Fatal(err)
		}
		evs := until(t, sub, session.EventPromptEnd)
		sub.Close()
		if u := last(evs).Usage; u == nil || u.PromptTokens() == 0 {
			t.Fatalf("prompt_end usage %+v: the call read no prompt", last(evs).Usage)
		}
		rec, ok, err := stA.Load(ctx, s.ID())
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if w := rec.Warm; w == nil || w.Model != "sim/echo" {
			t.Fatalf("stored warm cache = %+v, want sim/echo", w)
		}
	})
}

// A reader that comes as a prompt runs on another replica: the events
// stored between the copy's lookup and its subscription to the store's
// notifications (announced to nobody here) reach the reader at once, not at
// the manager's next poll of its followed copies (session.MirrorPoll).
func TestMemoryReplicasReaderCatchesUpOnSubscribe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := session.NewMemoryStore(512)
		a, bm := memReplica(t, b.Replica("rep_a"), 5*time.Second), memReplica(t, b.Replica("rep_b"), 5*time.Second)
		defer closeAll(t, a, bm)
		ctx := t.Context()
		s, err := a.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		copyOnB := get(t, bm, s.ID()) // looked up before the prompt's events
		if evs := prompt(t, a, s, "hi"); last(evs).Type != session.EventPromptEnd {
			t.Fatalf("prompt on A: %v", kinds(evs))
		}
		onB, err := copyOnB.Subscribe(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer onB.Close()
		evs := untilWithin(t, onB, session.EventPromptEnd, session.MirrorPoll/2)
		if evs[0].Type != session.EventAgentStart {
			t.Fatalf("B's reader: %v", kinds(evs))
		}
	})
}
