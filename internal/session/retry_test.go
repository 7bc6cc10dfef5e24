package session_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// simValidator lets the manager reject bad fault scripts, as the server does.
type simValidator struct{ *sim.Provider }

func (p simValidator) ValidatePrompt(text string) error {
	_, err := sim.ParseScript(text)
	return err
}

// newManager returns a manager with the simulated provider (models echo and
// backup) and a fixed jitter draw of u.
func newManager(t testing.TB, settings retry.Settings, u float64) *session.Manager {
	t.Helper()
	m := session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"},
			Client: simValidator{sim.New(sim.Options{})}}},
		Retry: settings,
		Rand:  func() float64 { return u },
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

// prompt runs text on a new session and returns its events up to prompt_end.
func prompt(t *testing.T, m *session.Manager, s *session.Session, text string) []session.Event {
	t.Helper()
	_, sub, err := s.Prompt(context.Background(), text)
	if err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	defer sub.Close()
	return readUntilEnd(t, sub)
}

func readUntilEnd(t *testing.T, sub *session.Subscription) []session.Event {
	t.Helper()
	var evs []session.Event
	for {
		e, err := sub.Next(context.Background())
		if err != nil {
			t.Fatalf("Next after %v: %v", kinds(evs), err)
		}
		evs = append(evs, e)
		if e.Type == session.EventPromptEnd {
			return evs
		}
	}
}

func create(t *testing.T, m *session.Manager, o session.RetryOverrides) *session.Session {
	t.Helper()
	s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo", Retry: o})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// kinds lists event types, message_update runs collapsed.
func kinds(evs []session.Event) string {
	var out []string
	for _, e := range evs {
		if e.Type == session.EventMessageUpdate && len(out) > 0 && out[len(out)-1] == e.Type {
			continue
		}
		out = append(out, e.Type)
	}
	return strings.Join(out, ",")
}

func only(evs []session.Event, typ string) []session.Event {
	var out []session.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func last(evs []session.Event) session.Event { return evs[len(evs)-1] }

func TestRetryChainRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 0.5)
		s := create(t, m, session.RetryOverrides{})
		start := time.Now()
		evs := prompt(t, m, s, "hi [[faults: 529,503,ok]]")
		elapsed := time.Since(start)

		want := "agent_start,message_start,message_end,agent_end,auto_retry_start," +
			"agent_start,message_start,message_end,agent_end,auto_retry_start," +
			"agent_start,message_start,message_update,message_end,auto_retry_end,agent_end,prompt_end"
		if got := kinds(evs); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
		starts := only(evs, session.EventAutoRetryStart)
		// 500ms and 1000ms nominal, times 0.75+0.25*0.5.
		for i, wantDelay := range []time.Duration{437500 * time.Microsecond, 875 * time.Millisecond} {
			st := starts[i]
			if st.Attempt != i+1 || st.MaxAttempts != 10 || st.Delay != wantDelay || st.DelaySource != "estimate" {
				t.Fatalf("auto_retry_start %d = attempt %d/%d delay %v source %q", i, st.Attempt, st.MaxAttempts, st.Delay, st.DelaySource)
			}
		}
		if starts[0].ErrorMessage != "529 overloaded_error: Overloaded" || starts[0].ErrorClass != "transient" {
			t.Fatalf("auto_retry_start error = %q (%s)", starts[0].ErrorMessage, starts[0].ErrorClass)
		}
		end := only(evs, session.EventAutoRetryEnd)[0]
		if !end.Success || end.Attempt != 2 || end.FinalError != "" {
			t.Fatalf("auto_retry_end = %+v", end)
		}
		if pe := last(evs); pe.Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", pe)
		}
		if elapsed != 437500*time.Microsecond+875*time.Millisecond {
			t.Fatalf("the chain slept %v", elapsed)
		}
		// The persisted history keeps both error entries; the state is idle again.
		entries, total, _ := s.Messages(context.Background(), 0, 100)
		if total != 4 || entries[1].Message.StopReason != "error" || entries[2].Message.StopReason != "error" || entries[3].Message.StopReason != "stop" {
			t.Fatalf("history = %+v", entries)
		}
		if st := s.State(); st.IsRetrying || st.RetryAttempt != 0 || st.Status != session.StatusIdle {
			t.Fatalf("state after chain = %+v", st)
		}
	})
}

func TestRetryStripsErrorFromRuntimeContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{Provider: sim.New(sim.Options{})}
		m2 := session.NewManager(session.Options{
			Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Client: rec}},
			Retry:     retry.DefaultSettings(), Rand: func() float64 { return 0 },
		})
		defer m2.Close(context.Background())
		s, err := m2.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		prompt(t, m2, s, "x [[faults: 500,ok]]")
		reqs := rec.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d calls", len(reqs))
		}
		// The retried call sees the user message only, not the failed turn.
		if n := len(reqs[1].Messages); n != 1 || reqs[1].Messages[0].Role != provider.RoleUser || reqs[1].Call != 1 {
			t.Fatalf("retried call context = %+v", reqs[1].Messages)
		}
	})
}

// recorder records the requests a provider sees.
type recorder struct {
	*sim.Provider
	mu   sync.Mutex
	reqs []provider.Request
}

func (r *recorder) Stream(ctx context.Context, req *provider.Request, on func(provider.Delta)) provider.Result {
	r.mu.Lock()
	r.reqs = append(r.reqs, *req)
	r.mu.Unlock()
	return r.Provider.Stream(ctx, req, on)
}

func (r *recorder) requests() []provider.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.Request(nil), r.reqs...)
}

func intp(n int) *int                     { return &n }
func durp(d time.Duration) *time.Duration { return &d }
func boolp(b bool) *bool                  { return &b }

func TestMaxRetriesExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{MaxRetries: intp(2)})
		evs := prompt(t, m, s, "[[faults: 529,529,529,ok]]")
		if n := len(only(evs, session.EventAutoRetryStart)); n != 2 {
			t.Fatalf("%d auto_retry_start, want 2: %s", n, kinds(evs))
		}
		end := only(evs, session.EventAutoRetryEnd)
		// The max-exceeded end reports the last attempted retry (attempt-1).
		if len(end) != 1 || end[0].Success || end[0].Attempt != 2 || end[0].FinalError != "529 overloaded_error: Overloaded" {
			t.Fatalf("auto_retry_end = %+v", end)
		}
		if pe := last(evs); pe.Outcome != session.OutcomeFailed || pe.Error != "529 overloaded_error: Overloaded" {
			t.Fatalf("prompt_end = %+v", pe)
		}
		// Counters reset: a new chain starts at attempt 1.
		evs = prompt(t, m, s, "[[faults: 500,ok]]")
		if st := only(evs, session.EventAutoRetryStart); len(st) != 1 || st[0].Attempt != 1 {
			t.Fatalf("next chain: %+v", st)
		}
	})
}

func TestMaxRetriesZeroEndsWithoutStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{MaxRetries: intp(0)})
		evs := prompt(t, m, s, "[[faults: 529]]")
		if got := kinds(evs); got != "agent_start,message_start,message_end,agent_end,auto_retry_end,prompt_end" {
			t.Fatalf("events = %s", got)
		}
		if e := only(evs, session.EventAutoRetryEnd)[0]; e.Attempt != 0 || e.Success {
			t.Fatalf("auto_retry_end = %+v", e)
		}
	})
}

func TestMaxDelayFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{MaxDelay: durp(60 * time.Second)})
		start := time.Now()
		evs := prompt(t, m, s, "[[faults: 429:retry-after=600,ok]]")
		if time.Since(start) != 0 {
			t.Fatalf("slept %v before failing fast", time.Since(start))
		}
		if n := len(only(evs, session.EventAutoRetryStart)); n != 0 {
			t.Fatalf("auto_retry_start emitted: %s", kinds(evs))
		}
		end := only(evs, session.EventAutoRetryEnd)
		if len(end) != 1 || end[0].Success || end[0].Attempt != 1 ||
			!strings.HasPrefix(end[0].FinalError, "Provider requested 600000ms wait, exceeds retry.maxDelayMs (60000ms). Original error: 429 rate_limit_error") {
			t.Fatalf("auto_retry_end = %+v", end)
		}
		if st := s.State(); st.IsRetrying || st.RetryAttempt != 0 {
			t.Fatalf("state = %+v", st)
		}
	})
}

func TestMaxDelayZeroDisablesTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{MaxDelay: durp(0)})
		start := time.Now()
		evs := prompt(t, m, s, "[[faults: 429:retry-after=600,ok]]")
		if time.Since(start) != 600*time.Second {
			t.Fatalf("slept %v, want the provider's 600s", time.Since(start))
		}
		st := only(evs, session.EventAutoRetryStart)
		if len(st) != 1 || st[0].Delay != 600*time.Second || st[0].DelaySource != "provider" {
			t.Fatalf("auto_retry_start = %+v", st)
		}
		if last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", last(evs))
		}
	})
}

func TestPermanentStops(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		overrides    session.RetryOverrides
		outcome      string
		extra        string // an event type that must appear
	}{
		{"retry disabled", "[[faults: 529,ok]]", session.RetryOverrides{Enabled: boolp(false)}, session.OutcomeFailed, ""},
		{"not retryable", "[[faults: 400,ok]]", session.RetryOverrides{}, session.OutcomeFailed, ""},
		{"auth error", "[[faults: 401,ok]]", session.RetryOverrides{}, session.OutcomeFailed, ""},
		{"context overflow", "[[faults: overflow,ok]]", session.RetryOverrides{}, session.OutcomeFailed, session.EventContextOverflow},
		{"output already streamed", "[[faults: midstream,ok]]", session.RetryOverrides{}, session.OutcomeFailed, ""},
		{"cut after output", "[[faults: cut,ok]]", session.RetryOverrides{}, session.OutcomeFailed, ""},
		{"refusal without fallback", "[[faults: refusal,ok]]", session.RetryOverrides{}, session.OutcomeFailed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newManager(t, retry.DefaultSettings(), 1)
				s := create(t, m, tc.overrides)
				evs := prompt(t, m, s, "q "+tc.script)
				if n := len(only(evs, session.EventAutoRetryStart)) + len(only(evs, session.EventAutoRetryEnd)); n != 0 {
					t.Fatalf("retry events: %s", kinds(evs))
				}
				if last(evs).Outcome != tc.outcome {
					t.Fatalf("prompt_end = %+v", last(evs))
				}
				if tc.extra != "" && len(only(evs, tc.extra)) != 1 {
					t.Fatalf("no %s: %s", tc.extra, kinds(evs))
				}
				if st := s.State(); st.IsRetrying || st.RetryAttempt != 0 {
					t.Fatalf("state = %+v", st)
				}
			})
		})
	}
}

func TestDisabledMidChainEndsTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		_, sub, err := s.Prompt(context.Background(), "[[faults: 529,529,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		waitFor(t, sub, session.EventAutoRetryStart)
		s.SetAutoRetry(t.Context(), false)
		evs := readUntilEnd(t, sub)
		end := only(evs, session.EventAutoRetryEnd)
		if len(end) != 1 || end[0].Success || end[0].Attempt != 1 || last(evs).Outcome != session.OutcomeFailed {
			t.Fatalf("after disabling: %s %+v", kinds(evs), end)
		}
		if s.State().Retry.Enabled {
			t.Fatal("SetAutoRetry(false) not reflected in the state")
		}
	})
}

// waitFor reads events until one of type typ.
func waitFor(t *testing.T, sub *session.Subscription, typ string) session.Event {
	t.Helper()
	for {
		e, err := sub.Next(context.Background())
		if err != nil {
			t.Fatalf("waiting for %s: %v", typ, err)
		}
		if e.Type == typ {
			return e
		}
	}
}

func TestAbortRetryDuringBackoff(t *testing.T) {
	for _, viaAbort := range []bool{false, true} {
		t.Run(fmt.Sprintf("abort=%v", viaAbort), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newManager(t, retry.DefaultSettings(), 1)
				s := create(t, m, session.RetryOverrides{})
				_, sub, err := s.Prompt(context.Background(), "[[faults: 429:retry-after=60,ok]]")
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
				waitFor(t, sub, session.EventAutoRetryStart)
				synctest.Wait() // the run is asleep in the backoff
				if st := s.State(); !st.IsRetrying || st.RetryAttempt != 1 || st.Status != session.StatusRetrying {
					t.Fatalf("state in backoff = %+v", st)
				}
				start := time.Now()
				if viaAbort {
					if err := s.Abort(context.Background()); err != nil {
						t.Fatal(err)
					}
				} else {
					s.AbortRetry(t.Context())
				}
				evs := readUntilEnd(t, sub)
				if time.Since(start) != 0 {
					t.Fatalf("cancel took %v", time.Since(start))
				}
				if got := kinds(evs); got != "auto_retry_end,prompt_end" {
					t.Fatalf("events after cancel = %s", got)
				}
				if e := evs[0]; e.Success || e.FinalError != "Retry cancelled" || e.Attempt != 1 {
					t.Fatalf("auto_retry_end = %+v", e)
				}
				if last(evs).Outcome != session.OutcomeAborted {
					t.Fatalf("prompt_end = %+v", last(evs))
				}
				if st := s.State(); st.IsRetrying || st.RetryAttempt != 0 || st.Status != session.StatusIdle {
					t.Fatalf("state after cancel = %+v", st)
				}
			})
		})
	}
}

func TestAbortRetryWhileRetriedCallStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		_, sub, err := s.Prompt(context.Background(), "[[faults: 529,500:delay=1000,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		waitFor(t, sub, session.EventAutoRetryStart)
		waitFor(t, sub, session.EventMessageStart) // the retried call is in flight
		s.AbortRetry(t.Context())
		evs := readUntilEnd(t, sub)
		if n := len(only(evs, session.EventAutoRetryStart)); n != 0 {
			t.Fatalf("retried again after AbortRetry: %s", kinds(evs))
		}
		end := only(evs, session.EventAutoRetryEnd)
		if len(end) != 1 || end[0].FinalError != "Retry cancelled" || last(evs).Outcome != session.OutcomeAborted {
			t.Fatalf("events = %s, end %+v", kinds(evs), end)
		}
	})
}

func TestAbortDuringStreamIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		_, sub, err := s.Prompt(context.Background(), "[[faults: hang:after=2,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		waitFor(t, sub, session.EventMessageUpdate)
		if err := s.Abort(context.Background()); err != nil {
			t.Fatal(err)
		}
		evs := readUntilEnd(t, sub)
		if n := len(only(evs, session.EventAutoRetryStart)); n != 0 {
			t.Fatalf("a user abort was retried: %s", kinds(evs))
		}
		me := only(evs, session.EventMessageEnd)
		if len(me) != 1 || me[0].StopReason != provider.StopAborted || last(evs).Outcome != session.OutcomeAborted {
			t.Fatalf("events = %s %+v", kinds(evs), me)
		}
	})
}

func TestReasonlessAbortIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: abort,ok]]")
		if n := len(only(evs, session.EventAutoRetryStart)); n != 1 || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("events = %s", kinds(evs))
		}
	})
}

func TestStaleReplayRetriesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		start := time.Now()
		evs := prompt(t, m, s, "[[faults: stale,ok]]")
		st := only(evs, session.EventAutoRetryStart)
		if len(st) != 1 || st[0].Delay != 0 || st[0].ErrorClass != "stale_replay" || time.Since(start) != 0 {
			t.Fatalf("auto_retry_start = %+v after %v", st, time.Since(start))
		}
		if last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", last(evs))
		}
	})
}

func TestNewPromptAfterAbortSkipsStaleContinuation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		firstID, sub, err := s.Prompt(context.Background(), "[[faults: 529,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		waitFor(t, sub, session.EventAutoRetryStart)
		if err := s.Abort(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Abort returns once the prompt ended: a new prompt is accepted at once.
		secondID, sub2, err := s.Prompt(context.Background(), "second")
		if err != nil {
			t.Fatalf("prompt after abort: %v", err)
		}
		defer sub2.Close()
		evs := readUntilEnd(t, sub2)
		time.Sleep(time.Hour) // any stale continuation would have fired by now
		synctest.Wait()
		for _, e := range evs {
			if e.PromptID != secondID {
				t.Fatalf("event of prompt %s in the second prompt's stream: %+v", e.PromptID, e)
			}
		}
		rest := readUntilEnd(t, sub)
		if last(rest).PromptID != firstID || last(rest).Outcome != session.OutcomeAborted {
			t.Fatalf("first prompt ended with %+v", last(rest))
		}
		if st := s.State(); st.LastSeq != last(evs).Seq {
			t.Fatalf("events after the second prompt ended: last seq %d, prompt_end %d", st.LastSeq, last(evs).Seq)
		}
		if last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("second prompt = %+v", last(evs))
		}
	})
}

func TestPromptWhileRetryingIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		_, sub, err := s.Prompt(context.Background(), "[[faults: 529,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		waitFor(t, sub, session.EventAutoRetryStart)
		if _, _, err := s.Prompt(context.Background(), "again"); err == nil || !strings.Contains(err.Error(), "retry chain is in progress") {
			t.Fatalf("prompt during backoff: %v", err)
		}
		readUntilEnd(t, sub)
	})
}

func TestThousandSessionsRetryAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		m := session.NewManager(session.Options{
			Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Client: sim.New(sim.Options{TokenDelay: time.Millisecond})}},
			Retry:     retry.DefaultSettings(),
			// n sessions of one tenant prompting at once: more than its
			// default limit of concurrent prompts.
			Limits: session.Limits{MaxConcurrentPromptsPerTenant: n},
		})
		defer m.Close(context.Background())
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo"})
				if err != nil {
					errs <- err
					return
				}
				_, sub, err := s.Prompt(context.Background(), fmt.Sprintf("n%d [[faults: 529,reset,ok]]", i))
				if err != nil {
					errs <- err
					return
				}
				defer sub.Close()
				var starts int
				for {
					e, err := sub.Next(context.Background())
					if err != nil {
						errs <- err
						return
					}
					if e.Type == session.EventAutoRetryStart {
						// Jitter keeps sessions out of lockstep: 75–100% of nominal.
						nominal := 500 * time.Millisecond << (e.Attempt - 1)
						if e.Delay < nominal*3/4 || e.Delay > nominal {
							errs <- fmt.Errorf("delay %v outside [%v, %v]", e.Delay, nominal*3/4, nominal)
						}
						starts++
					}
					if e.Type == session.EventPromptEnd {
						if e.Outcome != session.OutcomeCompleted || starts != 2 {
							errs <- fmt.Errorf("session %d: %s after %d retries", i, e.Outcome, starts)
						}
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}
