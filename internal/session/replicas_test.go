package session_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/sessionstore"
	"github.com/agentd/agentd/internal/testkit"
)

// replicas starts n session managers sharing one redis-server, as n agentd
// replicas do.
func replicas(t *testing.T, n int, settings retry.Settings) []*session.Manager {
	t.Helper()
	srv := redistest.Start(t)
	var ms []*session.Manager
	for range n {
		// A lease long enough for a loaded machine (-race, the whole suite
		// in parallel): the takeover tests use short ones.
		ms = append(ms, newReplica(t, srv.Addr(), settings, sim.Options{}, 5*time.Second).m)
	}
	return ms
}

// replicaT is one replica: its manager, its store and its Redis client.
type replicaT struct {
	m         *session.Manager
	store     *sessionstore.Redis
	client    redis.UniversalClient
	takeovers *takeoverCounter
}

// takeoverCounter counts what the Observer hears of takeovers.
type takeoverCounter struct {
	session.NopObserver
	mu sync.Mutex
	n  map[string]int
}

func (c *takeoverCounter) Takeover(outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[outcome]++
}

func (c *takeoverCounter) count(outcome string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[outcome]
}

// lose cuts the replica off from Redis, as if it died: its store and
// client close, and nothing it still runs reaches the others.
func (r *replicaT) lose() {
	r.store.Close()
	r.client.Close()
}

// newReplica starts a replica; opts adjust its manager's options.
func newReplica(t *testing.T, addr string, settings retry.Settings, pace sim.Options, lease time.Duration, opts ...func(*session.Options)) *replicaT {
	t.Helper()
	return newReplicaOf(t, addr, sessionstore.Options{}, settings, pace, lease, opts...)
}

// newReplicaOf is newReplica with its session store's options so (the key
// prefix and event buffer as newReplica's).
func newReplicaOf(t *testing.T, addr string, so sessionstore.Options, settings retry.Settings, pace sim.Options, lease time.Duration, opts ...func(*session.Options)) *replicaT {
	t.Helper()
	client := redis.NewUniversalClient(credstore.ClientOptions(&redis.UniversalOptions{Addrs: []string{addr}}, 0))
	so.KeyPrefix, so.EventBuffer = "test:", 512
	st, err := sessionstore.NewRedis(client, so)
	if err != nil {
		t.Fatal(err)
	}
	counter := &takeoverCounter{n: map[string]int{}}
	o := session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"},
			Client: simValidator{sim.New(pace)}}},
		Retry:    settings,
		Shared:   st,
		LeaseTTL: lease,
		Rand:     func() float64 { return 0.5 },
		Observer: counter,
	}
	for _, f := range opts {
		f(&o)
	}
	m := session.NewManager(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		st.Close()
		client.Close()
	})
	return &replicaT{m: m, store: st, client: client, takeovers: counter}
}

func get(t *testing.T, m *session.Manager, id string) *session.Session {
	t.Helper()
	s, err := m.Get(t.Context(), "t", id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return s
}

// next reads one event within a bounded wait.
func next(t *testing.T, sub *session.Subscription) session.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	e, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return e
}

func until(t *testing.T, sub *session.Subscription, typ string) []session.Event {
	t.Helper()
	var evs []session.Event
	for {
		e := next(t, sub)
		evs = append(evs, e)
		if e.Type == typ {
			return evs
		}
	}
}

// Create on A, prompt on B, follow from C, resume on C from the middle, and
// read the history anywhere.
func TestReplicasCreatePromptStream(t *testing.T) {
	ms := replicas(t, 3, retry.DefaultSettings())
	a, b, c := ms[0], ms[1], ms[2]
	s, err := a.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo", SystemPrompt: "be brief"})
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID()

	follow, err := get(t, c, id).Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()

	_, sub, err := get(t, b, id).Prompt(t.Context(), "hello [[tokens: 20]]")
	if err != nil {
		t.Fatal(err)
	}
	onB := until(t, sub, session.EventPromptEnd)
	sub.Close()
	onC := until(t, follow, session.EventPromptEnd)
	if len(onB) != len(onC) {
		t.Fatalf("B saw %d events, C %d", len(onB), len(onC))
	}
	for i := range onB {
		if onB[i].Seq != onC[i].Seq || onB[i].Type != onC[i].Type || onB[i].TextDelta != onC[i].TextDelta {
			t.Fatalf("event %d: B %+v, C %+v", i, onB[i], onC[i])
		}
	}
	if onC[len(onC)-1].Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v", onC[len(onC)-1])
	}

	// A reader on A resuming from the middle gets the rest, then the next
	// prompt's events (run on C this time).
	mid := onB[len(onB)/2].Seq
	resumed, err := get(t, a, id).Subscribe(t.Context(), mid)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if e := next(t, resumed); e.Seq != mid+1 {
		t.Fatalf("resumed after %d at %d", mid, e.Seq)
	}
	if _, sub, err = get(t, c, id).Prompt(t.Context(), "again"); err != nil {
		t.Fatal(err)
	}
	onC2 := until(t, sub, session.EventPromptEnd)
	sub.Close()
	last := until(t, resumed, session.EventPromptEnd)
	if last[len(last)-1].Seq != onB[len(onB)-1].Seq {
		t.Fatalf("resumed reader ended first prompt at %d, want %d", last[len(last)-1].Seq, onB[len(onB)-1].Seq)
	}
	last = until(t, resumed, session.EventPromptEnd)
	if got, want := last[len(last)-1].Seq, onC2[len(onC2)-1].Seq; got != want {
		t.Fatalf("A's reader ended the second prompt at %d, C at %d", got, want)
	}
	if onC2[0].Seq != onB[len(onB)-1].Seq+1 {
		t.Fatalf("second prompt's first seq %d does not follow %d", onC2[0].Seq, onB[len(onB)-1].Seq)
	}

	// The second prompt ran with the first's context: history on every replica.
	for i, m := range ms {
		entries, total, err := get(t, m, id).Messages(t.Context(), 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if total != 4 || entries[0].Message.Text() != "hello [[tokens: 20]]" || entries[3].Message.Role != provider.RoleAssistant {
			t.Fatalf("replica %d: history %d entries: %+v", i, total, entries)
		}
		st, err := get(t, m, id).Snapshot(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != session.StatusIdle || st.MessageCount != 4 || st.SystemPrompt != "be brief" || st.LastSeq != onC2[len(onC2)-1].Seq {
			t.Fatalf("replica %d: state %+v", i, st)
		}
	}
	list, _, err := b.List(t.Context(), "t", 10, "")
	if err != nil || len(list) != 1 || list[0].ID() != id {
		t.Fatalf("List on B = %v, %v", list, err)
	}
	if _, err := c.Get(t.Context(), "other", id); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("another tenant's Get = %v", err)
	}
}

// AbortRetry and GetSession sent to replicas that do not run the prompt
// reach the one that does.
func TestReplicasControlReachesOwner(t *testing.T) {
	ms := replicas(t, 2, retry.DefaultSettings())
	a, b := ms[0], ms[1]
	s, err := a.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	_, sub, err := s.Prompt(t.Context(), "[[faults: 429:retry-after=60,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	until(t, sub, session.EventAutoRetryStart)

	onB := get(t, b, s.ID())
	st, err := onB.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != session.StatusRetrying || !st.IsRetrying || st.RetryAttempt != 1 {
		t.Fatalf("state through B = %+v", st)
	}
	if _, _, err := onB.Prompt(t.Context(), "no"); !errors.Is(err, session.ErrBusy) {
		t.Fatalf("Prompt on B while A runs = %v", err)
	}
	if err := onB.AbortRetry(t.Context()); err != nil {
		t.Fatal(err)
	}
	evs := until(t, sub, session.EventPromptEnd)
	end := evs[len(evs)-1]
	if end.Outcome != session.OutcomeAborted || end.Error != "Retry cancelled" {
		t.Fatalf("prompt_end = %+v", end)
	}
	// Free again, on either replica.
	if _, sub2, err := onB.Prompt(t.Context(), "next"); err != nil {
		t.Fatal(err)
	} else {
		until(t, sub2, session.EventPromptEnd)
		sub2.Close()
	}
}

// Tool results sent to a replica that does not run the prompt reach the
// one that does; a bad one is refused there, with the field named.
func TestReplicasToolResultsReachOwner(t *testing.T) {
	ms := replicas(t, 2, retry.DefaultSettings())
	a, b := ms[0], ms[1]
	s, err := a.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo",
		Tools: []provider.Tool{{Name: "lookup"}}})
	if err != nil {
		t.Fatal(err)
	}
	_, sub, err := s.Prompt(t.Context(), "[[tools: lookup]]")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	evs := until(t, sub, session.EventToolCall)
	call := evs[len(evs)-1].ToolCall
	onB := get(t, b, s.ID())
	var inv *session.InvalidError
	if err := onB.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: "nope"}}); !errors.As(err, &inv) || inv.Field != "results[0].call_id" {
		t.Fatalf("bad result through B = %v", err)
	}
	if err := onB.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: call.CallID, Content: "42"}}); err != nil {
		t.Fatal(err)
	}
	evs = until(t, sub, session.EventPromptEnd)
	if end := evs[len(evs)-1]; end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v", end)
	}
	if err := onB.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: call.CallID}}); !errors.Is(err, session.ErrNotWaiting) {
		t.Fatalf("results after the run = %v", err)
	}
}

// Prompts sent to one session from every replica at once: exactly one runs.
func TestReplicasConcurrentPromptsOneRuns(t *testing.T) {
	ms := replicas(t, 3, retry.DefaultSettings())
	s, err := ms[0].Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		var ran, busy atomic.Int32
		var wg sync.WaitGroup
		var subs sync.Map
		for i := range 12 {
			wg.Go(func() {
				_, sub, err := get(t, ms[i%3], s.ID()).Prompt(t.Context(), fmt.Sprintf("round %d from %d [[faults: ok:delay=300]]", round, i))
				switch {
				case err == nil:
					ran.Add(1)
					subs.Store(i, sub)
				case errors.Is(err, session.ErrBusy):
					busy.Add(1)
				default:
					t.Errorf("Prompt: %v", err)
				}
			})
		}
		wg.Wait()
		if ran.Load() != 1 || busy.Load() != 11 {
			t.Fatalf("round %d: %d ran, %d busy", round, ran.Load(), busy.Load())
		}
		subs.Range(func(_, v any) bool {
			sub := v.(*session.Subscription)
			until(t, sub, session.EventPromptEnd)
			sub.Close()
			return true
		})
	}
	_, total, err := get(t, ms[2], s.ID()).Messages(t.Context(), 0, 1)
	if err != nil || total != 10 {
		t.Fatalf("history has %d entries (%v), want 10", total, err)
	}
}

// Deleting on one replica aborts the prompt running on another and ends
// every replica's readers.
func TestReplicasDelete(t *testing.T) {
	ms := replicas(t, 2, retry.DefaultSettings())
	a, b := ms[0], ms[1]
	s, err := a.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	_, sub, err := s.Prompt(t.Context(), "[[faults: 529:retry-after=60,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	until(t, sub, session.EventAutoRetryStart)
	follow, err := get(t, b, s.ID()).Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()
	if err := b.Delete(t.Context(), "t", s.ID()); err != nil {
		t.Fatal(err)
	}
	evs := until(t, sub, session.EventPromptEnd)
	if end := evs[len(evs)-1]; end.Outcome != session.OutcomeAborted {
		t.Fatalf("prompt_end = %+v", end)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		_, err := follow.Next(ctx)
		if errors.Is(err, session.ErrLogClosed) {
			break
		}
		if err != nil {
			t.Fatalf("B's reader: %v", err)
		}
	}
	for _, m := range ms {
		if _, err := m.Get(t.Context(), "t", s.ID()); !errors.Is(err, session.ErrNotFound) {
			t.Fatalf("Get after delete = %v", err)
		}
	}
}

// Many sessions prompting through random replicas while readers follow
// them from others.
func TestReplicasStress(t *testing.T) {
	ms := replicas(t, 3, retry.Settings{Enabled: true, MaxRetries: 3, BaseDelay: time.Millisecond, MaxDelay: time.Second})
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := ms[i%3].Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
			if err != nil {
				t.Error(err)
				return
			}
			follow, err := get(t, ms[(i+1)%3], s.ID()).Subscribe(t.Context(), 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer follow.Close()
			for p := range 3 {
				_, sub, err := get(t, ms[(i+p)%3], s.ID()).Prompt(t.Context(), "go [[faults: 503,ok]] [[tokens: 5]]")
				if err != nil {
					t.Error(err)
					return
				}
				evs := until(t, sub, session.EventPromptEnd)
				sub.Close()
				if end := evs[len(evs)-1]; end.Outcome != session.OutcomeCompleted {
					t.Errorf("prompt_end = %+v", end)
				}
				fevs := until(t, follow, session.EventPromptEnd)
				if fevs[len(fevs)-1].Seq != evs[len(evs)-1].Seq {
					t.Errorf("follower ended at %d, runner at %d", fevs[len(fevs)-1].Seq, evs[len(evs)-1].Seq)
				}
			}
		})
	}
	wg.Wait()
	list, _, err := ms[1].List(t.Context(), "t", 1000, "")
	if err != nil || len(list) != n {
		t.Fatalf("List = %d sessions, %v", len(list), err)
	}
	for _, s := range list {
		if !strings.HasPrefix(s.ID(), "ses_") {
			t.Fatal(s.ID())
		}
	}
}

// createFollowed creates a session on a, followed from b from its start.
func createFollowed(t *testing.T, a, b *replicaT) (*session.Session, *session.Subscription) {
	t.Helper()
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	follow, err := get(t, b.m, s.ID()).Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(follow.Close)
	return s, follow
}

// A replica lost while its prompt waits in backoff: another replica takes
// the prompt over once the lease expires and runs the retry at its
// scheduled time; the prompt completes for the clients following it.
func TestReplicasTakeOverResumesRetry(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second)
	s, follow := createFollowed(t, a, b)
	_, sub, err := s.Prompt(t.Context(), "resume me [[faults: 529:retry-after=3,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	evs := until(t, follow, session.EventAutoRetryStart)
	start := evs[len(evs)-1]
	a.lose()

	evs = until(t, follow, session.EventPromptEnd)
	end := evs[len(evs)-1]
	if end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v after %v", end, kinds(evs))
	}
	var ended *session.Event
	for i, e := range evs {
		if e.Type == session.EventAutoRetryEnd {
			ended = &evs[i]
		}
		// The due time is stored just before auto_retry_start goes out.
		if due := start.Time.Add(start.Delay - 100*time.Millisecond); e.Type == session.EventMessageStart && e.Time.Before(due) {
			t.Fatalf("the retry ran at %v, before its due time %v", e.Time, due)
		}
	}
	if ended == nil || !ended.Success || ended.Attempt != 1 {
		t.Fatalf("auto_retry_end = %+v in %v", ended, kinds(evs))
	}
	if n := b.takeovers.count(session.TakeoverResumed); n != 1 {
		t.Fatalf("B resumed %d retries", n)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("seq %d follows %d", evs[i].Seq, evs[i-1].Seq)
		}
	}
	// The resumed call saw the prompt without the failed answer, and the
	// session goes on on B.
	entries, total, err := get(t, b.m, s.ID()).Messages(t.Context(), 0, 10)
	if err != nil || total != 3 || entries[1].Message.StopReason != provider.StopError || entries[2].Message.StopReason != provider.StopEnd {
		t.Fatalf("history = %d entries %+v, %v", total, entries, err)
	}
	if _, sub, err = get(t, b.m, s.ID()).Prompt(t.Context(), "after"); err != nil {
		t.Fatal(err)
	}
	evs = until(t, sub, session.EventPromptEnd)
	sub.Close()
	if end := evs[len(evs)-1]; end.Outcome != session.OutcomeCompleted {
		t.Fatalf("next prompt: %+v", end)
	}
}

// A replica lost while its prompt streams: the prompt ends for its clients
// with "owner replica lost", and the session takes new prompts elsewhere.
func TestReplicasTakeOverEndsLostStream(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{TokenDelay: 20 * time.Millisecond}, time.Second)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second)
	s, follow := createFollowed(t, a, b)
	_, onA, err := s.Prompt(t.Context(), "a long answer [[tokens: 1000]]")
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Close()
	until(t, follow, session.EventMessageUpdate)
	a.lose()
	evs := until(t, follow, session.EventPromptEnd)
	if end := evs[len(evs)-1]; end.Outcome != session.OutcomeFailed || end.Error != session.ErrOwnerLost {
		t.Fatalf("prompt_end = %+v", end)
	}
	// What the lost replica left open is closed: its message, its run.
	if n := len(evs); n < 3 || evs[n-3].Type != session.EventMessageEnd || evs[n-3].StopReason != provider.StopError ||
		evs[n-3].ErrorMessage != session.ErrOwnerLost || evs[n-2].Type != session.EventAgentEnd {
		t.Fatalf("events before prompt_end: %v", kinds(evs))
	}
	st, err := get(t, b.m, s.ID()).Snapshot(t.Context())
	if err != nil || st.Status != session.StatusIdle {
		t.Fatalf("state = %+v, %v", st, err)
	}
	_, sub, err := get(t, b.m, s.ID()).Prompt(t.Context(), "again")
	if err != nil {
		t.Fatal(err)
	}
	evs = until(t, sub, session.EventPromptEnd)
	sub.Close()
	if end := evs[len(evs)-1]; end.Outcome != session.OutcomeCompleted {
		t.Fatalf("next prompt: %+v", end)
	}
	// A, cut off from the store for a whole lease, stopped its part
	// without a word more: its reader saw only stored events, and is told
	// where to resume; resumed there on B, it sees the prompt's one end.
	seen, resume := untilResume(t, onA)
	if only(seen, session.EventPromptEnd) != nil || (len(seen) > 0 && seen[len(seen)-1].Seq > resume.After) {
		t.Fatalf("A's reader got %v, then resume after %d", kinds(seen), resume.After)
	}
	onB, err := get(t, b.m, s.ID()).Subscribe(t.Context(), resume.After)
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Close()
	if end := last(until(t, onB, session.EventPromptEnd)); end.Outcome != session.OutcomeFailed || end.Error != session.ErrOwnerLost {
		t.Fatalf("resumed on B: prompt_end %+v", end)
	}
	if b.takeovers.count(session.TakeoverEnded) != 1 || a.takeovers.count(session.TakeoverLeaseLost) != 1 {
		t.Fatalf("takeovers: B %v, A %v", b.takeovers.n, a.takeovers.n)
	}
	checkLog(t, b.store, s.ID(), seen)
}

// untilResume reads events until the subscription ends with a
// *session.ResumeError (its replica lost the lease), within a bounded wait.
func untilResume(t *testing.T, sub *session.Subscription) ([]session.Event, *session.ResumeError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var evs []session.Event
	for {
		e, err := sub.Next(ctx)
		var re *session.ResumeError
		switch {
		case errors.As(err, &re):
			return evs, re
		case err != nil:
			t.Fatalf("Next: %v (want a resume error), after %v", err, kinds(evs))
		}
		evs = append(evs, e)
	}
}

// storedLog is what the history checker reads of a store.
type storedLog interface {
	Flush(ctx context.Context, id string) error
	Events(ctx context.Context, id string, after uint64, count int) ([]session.Event, error)
}

// checkLog is the history checker: the stored log of session id runs from
// seq 1 (or the oldest kept) without a gap, every prompt in it ends with
// exactly one prompt_end, and every event a client saw (seen, any number
// of readers' events) is the stored event of its seq.
func checkLog(t *testing.T, st storedLog, id string, seen ...[]session.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := st.Flush(ctx, id); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Events(ctx, id, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[uint64]session.Event{}
	ends := map[string]int{}
	var prompts []string
	for i, e := range stored {
		if i == 0 && e.Seq != 1 && len(stored) < 400 {
			t.Errorf("stored log starts at seq %d", e.Seq)
		}
		if i > 0 && e.Seq != stored[i-1].Seq+1 {
			t.Errorf("stored log: seq %d follows %d", e.Seq, stored[i-1].Seq)
		}
		bySeq[e.Seq] = e
		if e.PromptID != "" {
			if _, ok := ends[e.PromptID]; !ok {
				prompts = append(prompts, e.PromptID)
				ends[e.PromptID] = 0
			}
		}
		if e.Type == session.EventPromptEnd {
			ends[e.PromptID]++
		}
	}
	for _, p := range prompts {
		if ends[p] != 1 {
			t.Errorf("prompt %s has %d stored prompt_end", p, ends[p])
		}
	}
	for _, evs := range seen {
		for _, e := range evs {
			got, ok := bySeq[e.Seq]
			if !ok || got.Type != e.Type || got.PromptID != e.PromptID || got.TextDelta != e.TextDelta {
				t.Errorf("a client saw seq %d %s %q; the stored log has %s %q", e.Seq, e.Type, e.TextDelta, got.Type, got.TextDelta)
			}
		}
	}
}

// A replica shutting down hands the retries waiting in backoff to the
// others, which resume them at their due time; no prompt_end goes out in
// between.
func TestReplicasShutdownHandsOverRetry(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second)
	s, follow := createFollowed(t, a, b)
	_, sub, err := s.Prompt(t.Context(), "[[faults: 503:retry-after=2,ok]]")
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	until(t, follow, session.EventAutoRetryStart)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	evs := until(t, follow, session.EventPromptEnd)
	if end := evs[len(evs)-1]; end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v after %v", end, kinds(evs))
	}
	if evs[0].Type != session.EventAgentStart {
		t.Fatalf("after the hand-over: %v", kinds(evs))
	}
	if a.takeovers.count(session.TakeoverHandedOff) != 1 || b.takeovers.count(session.TakeoverResumed) != 1 {
		t.Fatalf("takeovers: A %v, B %v", a.takeovers.n, b.takeovers.n)
	}
}

// A prompt reuses the replica's copy of a session without reading the
// store first (its start reads the record): a copy of a session deleted on
// another replica, unknown to this one, answers not found, leaves no lease
// behind and is dropped.
func TestReplicasPromptOnStaleCopy(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, 5*time.Second)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, 5*time.Second)
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	bs, err := b.m.GetToPrompt(t.Context(), "t", s.ID())
	if err != nil {
		t.Fatal(err)
	}
	promptToEnd(t, bs, "one")
	if again, err := b.m.GetToPrompt(t.Context(), "t", s.ID()); err != nil || again != bs {
		t.Fatalf("GetToPrompt = %p, %v; want B's copy %p", again, err, bs)
	}
	if _, err := b.m.GetToPrompt(t.Context(), "other-tenant", s.ID()); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("another tenant's GetToPrompt = %v", err)
	}
	// Deleted through A's store directly: nothing tells B.
	if err := a.store.Remove(t.Context(), s.ID(), "t"); err != nil {
		t.Fatal(err)
	}
	stale, err := b.m.GetToPrompt(t.Context(), "t", s.ID())
	if err != nil || stale != bs {
		t.Fatalf("GetToPrompt of the stale copy = %v", err)
	}
	if _, _, err := stale.Prompt(t.Context(), "two"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Prompt on a deleted session = %v; want ErrNotFound", err)
	}
	if h, err := b.store.Holder(t.Context(), s.ID()); h != "" || err != nil {
		t.Fatalf("lease of the deleted session held by %q (%v)", h, err)
	}
	if _, err := b.m.GetToPrompt(t.Context(), "t", s.ID()); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("GetToPrompt after the failed prompt = %v; want ErrNotFound", err)
	}
}

// Readers on a replica that does not run the session follow the stored
// log without a goroutine per session: idle, they cost none; notifications
// still bring each prompt's events; once the last reader left, the
// replica stops following (its notify subscription goes).
func TestReplicasIdleFollowersCostNoGoroutine(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, 5*time.Second)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, 5*time.Second)
	const n = 30
	var ids []string
	for range n {
		s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID())
	}
	// Counted in the session engine's code only: the Redis client's pools
	// and the runtime's goroutines come and go with the load.
	const engine = "github.com/agentd/agentd/internal/session."
	before := testkit.Goroutines(engine)
	var subs []*session.Subscription
	for _, id := range ids {
		sub, err := get(t, b.m, id).Subscribe(t.Context(), 0)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	// The pulls and subscriptions the readers started end at once.
	testkit.EventuallyErr(t, "the readers' pulls ended", func() error {
		if d := testkit.Goroutines(engine) - before; d >= n/2 {
			return fmt.Errorf("%d idle followers cost %d goroutines", n, d)
		}
		return nil
	})
	// A prompt on A reaches B's reader.
	promptToEnd(t, get(t, a.m, ids[7]), "one two")
	if evs := until(t, subs[7], session.EventPromptEnd); len(evs) < 5 {
		t.Fatalf("B's reader got %d events", len(evs))
	}
	channels := func() int {
		chs, err := b.client.PubSubChannels(t.Context(), "test:{ses_*}:notify").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(chs)
	}
	if c := channels(); c != n {
		t.Fatalf("%d notify subscriptions for %d followed sessions", c, n)
	}
	for _, sub := range subs {
		sub.Close()
	}
	// The poller stops following within a round or two (2 s each).
	testkit.EventuallyErr(t, "the notify subscriptions ended", func() error {
		if c := channels(); c != 0 {
			return fmt.Errorf("%d notify subscriptions left after the readers closed", c)
		}
		return nil
	})
}

// A prompt whose start fails after the store took its user message (here:
// the history cannot be read back) leaves neither the message, nor a
// lease, nor a run.
func TestReplicasFailedStartLeavesNothing(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, 5*time.Second)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, 5*time.Second)
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	promptToEnd(t, s, "one")
	history := "test:{" + s.ID() + "}:history"
	if err := a.client.RPush(t.Context(), history, "not an entry").Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err = get(t, b.m, s.ID()).Prompt(t.Context(), "two")
	if !errors.Is(err, session.ErrUnavailable) {
		t.Fatalf("Prompt over an unreadable history = %v; want ErrUnavailable", err)
	}
	if n, _ := a.client.LLen(t.Context(), history).Result(); n != 3 {
		t.Fatalf("history holds %d entries after the failed start; want 3", n)
	}
	if h, _ := a.store.Holder(t.Context(), s.ID()); h != "" {
		t.Fatalf("lease held by %q after the failed start", h)
	}
	if _, ok, _ := a.store.LoadRun(t.Context(), s.ID()); ok {
		t.Fatal("a run stays after the failed start")
	}
	if err := a.client.RPop(t.Context(), history).Err(); err != nil {
		t.Fatal(err)
	}
	promptToEnd(t, get(t, b.m, s.ID()), "two")
	if entries, n, err := get(t, b.m, s.ID()).Messages(t.Context(), 0, 10); err != nil || n != 4 || entries[2].Message.Content[0].Text != "two" {
		t.Fatalf("history = %d entries: %+v (%v)", n, entries, err)
	}
}

// promptToEnd runs a prompt on s and reads it to its prompt_end.
func promptToEnd(t *testing.T, s *session.Session, text string) []session.Event {
	t.Helper()
	_, sub, err := s.Prompt(t.Context(), text)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	return until(t, sub, session.EventPromptEnd)
}
