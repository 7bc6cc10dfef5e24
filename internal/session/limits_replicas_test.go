package session_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// limitedReplicas starts n replicas sharing one redis-server, each with
// lim; the first one's provider has pace.
func limitedReplicas(t *testing.T, n int, lim session.Limits, pace sim.Options, lease time.Duration, opts ...func(*session.Options)) []*replicaT {
	t.Helper()
	addr := redistest.Start(t).Addr()
	opts = append(opts, withLimits(lim))
	var rs []*replicaT
	for i := range n {
		if i > 0 {
			pace = sim.Options{}
		}
		rs = append(rs, newReplica(t, addr, retry.DefaultSettings(), pace, lease, opts...))
	}
	return rs
}

func twoLimited(t *testing.T, lim session.Limits, pace sim.Options, lease time.Duration) (a, b *replicaT) {
	t.Helper()
	rs := limitedReplicas(t, 2, lim, pace, lease)
	return rs[0], rs[1]
}

// limits.max_sessions_per_tenant counts the tenant's sessions over both
// replicas, one at a time and all at once.
func TestReplicasLimitSessionsPerTenant(t *testing.T) {
	a, b := twoLimited(t, session.Limits{MaxSessionsPerTenant: 3}, sim.Options{}, 5*time.Second)
	newSession(t, a.m, "t")
	newSession(t, b.m, "t")
	first := newSession(t, a.m, "t")
	for _, r := range []*replicaT{a, b} {
		_, err := r.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
		wantLimit(t, err, session.LimitSessionsPerTenant, "tenant has 3 sessions, the limit; delete one before creating another")
	}
	if got := sessionIDs(t, b.m, "t"); len(got) != 3 {
		t.Fatalf("the tenant has %d sessions", len(got))
	}
	newSession(t, b.m, "other")
	// Deleted on B, created on A.
	if err := b.m.Delete(t.Context(), "t", first.ID()); err != nil {
		t.Fatal(err)
	}
	newSession(t, a.m, "t")

	// All at once on both: exactly the limit's worth.
	const n = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, refusedN := 0, 0
	for i := range n {
		r := []*replicaT{a, b}[i%2]
		wg.Go(func() {
			_, err := r.m.Create(t.Context(), "race", session.CreateParams{Model: "sim/echo"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			default:
				wantLimit(t, err, session.LimitSessionsPerTenant, "tenant has 3 sessions, the limit; delete one before creating another")
				refusedN++
			}
		})
	}
	wg.Wait()
	if created != 3 || refusedN != n-3 {
		t.Fatalf("%d created, %d refused at once with a limit of 3", created, refusedN)
	}
	if got := sessionIDs(t, a.m, "race"); len(got) != 3 {
		t.Fatalf("the tenant has %d sessions listed", len(got))
	}
}

// limits.max_concurrent_prompts_per_tenant counts the tenant's running
// prompts over both replicas: a prompt running on A and one on B leave no
// room on either; another tenant is not concerned; a prompt ended from the
// other replica frees its slot for both.
func TestReplicasLimitConcurrentPrompts(t *testing.T) {
	a, b := twoLimited(t, session.Limits{MaxConcurrentPromptsPerTenant: 2}, sim.Options{}, 5*time.Second)
	// Looked up before each use: a replica drops the copies nobody uses.
	s1, s2, s3 := newSession(t, a.m, "t").ID(), newSession(t, a.m, "t").ID(), newSession(t, b.m, "t").ID()
	_, sub1, err := get(t, a.m, s1).Prompt(t.Context(), "hang [[faults: hang]]")
	if err != nil {
		t.Fatal(err)
	}
	defer sub1.Close()
	_, sub2, err := get(t, b.m, s2).Prompt(t.Context(), "hang [[faults: hang]]")
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	refused(t, b, get(t, b.m, s3), "2")
	refused(t, a, get(t, a.m, s3), "2")
	other := newSession(t, b.m, "other")
	if end := last(promptToEnd(t, other, "mine")); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("other tenant's prompt_end = %+v", end)
	}
	// A's prompt aborted from B (a control call to A): its slot is free
	// once its prompt_end is out, for a prompt on B.
	if err := get(t, b.m, s1).Abort(t.Context()); err != nil {
		t.Fatal(err)
	}
	until(t, sub1, session.EventPromptEnd)
	_, sub3, err := get(t, b.m, s3).Prompt(t.Context(), "hang [[faults: hang]]")
	if err != nil {
		t.Fatalf("Prompt on B after A's prompt ended: %v", err)
	}
	defer sub3.Close()
	refused(t, a, get(t, a.m, s1), "2")
}

// A replica shutting down ends its prompts (their slots free for the
// other replicas), but a retry it hands over keeps its slot: the replica
// resuming it counts it.
func TestReplicasLimitPromptsFreedOnShutdown(t *testing.T) {
	resumed := make(chan struct{}, 1)
	rs := limitedReplicas(t, 3, session.Limits{MaxConcurrentPromptsPerTenant: 1}, sim.Options{}, time.Second,
		observeTakeovers(resumed))
	a, b, c := rs[0], rs[1], rs[2]
	s1, s2 := newSession(t, a.m, "t").ID(), newSession(t, b.m, "t").ID()
	follow, err := get(t, b.m, s1).Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()
	_, sub, err := get(t, a.m, s1).Prompt(t.Context(), "hand me over [[faults: 503:retry-after=5,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	until(t, follow, session.EventAutoRetryStart)
	refused(t, b, get(t, b.m, s2), "1")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-resumed:
	case <-ctx.Done():
		t.Fatal("B never resumed the retry A handed over")
	}
	// B (or C) waits for the retry's due time: the prompt counts there.
	refused(t, b, get(t, b.m, s2), "1")
	if end := last(until(t, follow, session.EventPromptEnd)); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v", end)
	}
	if end := last(promptToEnd(t, get(t, b.m, s2), "now")); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v", end)
	}

	// A prompt streaming at shutdown is aborted: its slot is free for B.
	_, sub, err = get(t, c.m, s1).Prompt(t.Context(), "hang [[faults: hang]]")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	refused(t, b, get(t, b.m, s2), "1")
	if err := c.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if end := last(until(t, sub, session.EventPromptEnd)); end.Outcome != session.OutcomeAborted {
		t.Fatalf("prompt_end = %+v", end)
	}
	if end := last(promptToEnd(t, get(t, b.m, s2), "now")); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v", end)
	}
}

// A replica lost while its prompt streams: once another replica has taken
// the prompt over and ended it, the lost replica's slot no longer counts.
// A replica lost while its prompt waits in backoff: the replica resuming
// the retry counts it until its prompt_end.
func TestReplicasLimitPromptsFreedOnTakeover(t *testing.T) {
	resumed := make(chan struct{}, 1)
	rs := limitedReplicas(t, 3, session.Limits{MaxConcurrentPromptsPerTenant: 1}, sim.Options{TokenDelay: 20 * time.Millisecond},
		time.Second, observeTakeovers(resumed))
	a, b, c := rs[0], rs[1], rs[2]
	s1, s2 := newSession(t, a.m, "t").ID(), newSession(t, b.m, "t").ID()
	follow, err := get(t, b.m, s1).Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()
	_, onA, err := get(t, a.m, s1).Prompt(t.Context(), "a long answer [[tokens: 1000]]")
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()
	until(t, follow, session.EventMessageUpdate)
	refused(t, b, get(t, b.m, s2), "1")
	a.lose()
	if end := last(until(t, follow, session.EventPromptEnd)); end.Outcome != session.OutcomeFailed || end.Error != session.ErrOwnerLost {
		t.Fatalf("prompt_end = %+v", end)
	}
	for i := range 2 {
		if end := last(promptToEnd(t, get(t, b.m, s2), fmt.Sprint("after the takeover ", i))); end.Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", end)
		}
	}

	// Lost in backoff: B resumes the retry, and counts it at once.
	s3 := newSession(t, c.m, "t").ID()
	follow3, err := get(t, b.m, s3).Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer follow3.Close()
	_, sub, err := get(t, c.m, s3).Prompt(t.Context(), "resume me [[faults: 529:retry-after=5,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	until(t, follow3, session.EventAutoRetryStart)
	refused(t, b, get(t, b.m, s2), "1")
	c.lose()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	select {
	case <-resumed:
	case <-ctx.Done():
		t.Fatal("B never resumed the lost replica's retry")
	}
	refused(t, b, get(t, b.m, s2), "1")
	if end := last(until(t, follow3, session.EventPromptEnd)); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v", end)
	}
	if end := last(promptToEnd(t, get(t, b.m, s2), "after the resumed retry")); end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v", end)
	}
}

// observeTakeovers signals resumed when the replica resumes a retry it took
// over.
func observeTakeovers(resumed chan<- struct{}) func(*session.Options) {
	return func(o *session.Options) {
		o.Observer = &takeoverSignal{Observer: o.Observer, resumed: resumed}
	}
}

type takeoverSignal struct {
	session.Observer
	resumed chan<- struct{}
}

func (s *takeoverSignal) Takeover(outcome string) {
	s.Observer.Takeover(outcome)
	if outcome == session.TakeoverResumed {
		select {
		case s.resumed <- struct{}{}:
		default:
		}
	}
}

// limits.max_history_bytes holds for a session whatever replica its
// prompts reach: a replica whose copy never saw the history counts it
// from the store at the prompt's start, and refuses.
func TestReplicasLimitHistoryBytes(t *testing.T) {
	a, b := twoLimited(t, session.Limits{MaxHistoryBytes: 5000}, sim.Options{}, 5*time.Second)
	id := newSession(t, a.m, "t").ID()
	for range 3 {
		if end := last(promptToEnd(t, get(t, a.m, id), strings.Repeat("y", 1000))); end.Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", end)
		}
	}
	for _, r := range []*replicaT{b, a} {
		_, _, err := get(t, r.m, id).Prompt(t.Context(), "one more")
		var le *session.LimitError
		if !errors.As(err, &le) || le.Limit != session.LimitHistoryBytes {
			t.Fatalf("a prompt past the history's limit: %v; want %s", err, session.LimitHistoryBytes)
		}
	}
	if _, total, err := get(t, b.m, id).Messages(t.Context(), 0, 0); err != nil || total != 6 {
		t.Fatalf("history after the refusals: %d entries (%v); want the 6 of three prompts", total, err)
	}
}
