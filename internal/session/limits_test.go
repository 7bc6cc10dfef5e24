package session_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// stores are the two ways of keeping sessions the limits tests run on.
var stores = []string{"memory", "redis"}

// limited returns a manager with lim on store: in memory, or one replica
// on a redis-server of the test's own (its store is returned too).
func limited(t *testing.T, store string, lim session.Limits, settings retry.Settings) (*session.Manager, *replicaT) {
	t.Helper()
	if store == "redis" {
		r := newReplica(t, redistest.Start(t).Addr(), settings, sim.Options{}, 5*time.Second, withLimits(lim))
		return r.m, r
	}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"},
			Client: simValidator{sim.New(sim.Options{})}}},
		Retry:  settings,
		Rand:   func() float64 { return 0.5 },
		Limits: lim,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m, nil
}

func withLimits(lim session.Limits) func(*session.Options) {
	return func(o *session.Options) { o.Limits = lim }
}

func newSession(t *testing.T, m *session.Manager, tenant string) *session.Session {
	t.Helper()
	s, err := m.Create(t.Context(), tenant, session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatalf("Create for %s: %v", tenant, err)
	}
	return s
}

// wantLimit checks that err is the limit's error, with its message.
func wantLimit(t *testing.T, err error, limit, msg string) {
	t.Helper()
	var le *session.LimitError
	if !errors.Is(err, session.ErrLimit) || !errors.As(err, &le) || le.Limit != limit || err.Error() != limit+": "+msg {
		t.Fatalf("error = %v; want %s: %s (ErrLimit)", err, limit, msg)
	}
}

// sessionIDs lists tenant's sessions.
func sessionIDs(t *testing.T, m *session.Manager, tenant string) []string {
	t.Helper()
	ss, _, err := m.List(t.Context(), tenant, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range ss {
		ids = append(ids, s.ID())
	}
	return ids
}

// A tenant at limits.max_sessions_per_tenant gets ErrLimit naming it, and
// nothing is created; another tenant is not concerned; a deleted session
// frees its place.
func TestLimitSessionsPerTenant(t *testing.T) {
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			m, _ := limited(t, store, session.Limits{MaxSessionsPerTenant: 3}, retry.DefaultSettings())
			var ids []string
			for range 3 {
				ids = append(ids, newSession(t, m, "a").ID())
			}
			_, err := m.Create(t.Context(), "a", session.CreateParams{Model: "sim/echo"})
			wantLimit(t, err, session.LimitSessionsPerTenant, "tenant has 3 sessions, the limit; delete one before creating another")
			if got := sessionIDs(t, m, "a"); len(got) != 3 || m.Count() != 3 {
				t.Fatalf("after the refusal: %d sessions listed, %d in the registry", len(got), m.Count())
			}
			// Tenant b is not concerned by a's count.
			for range 3 {
				newSession(t, m, "b")
			}
			_, err = m.Create(t.Context(), "b", session.CreateParams{Model: "sim/echo"})
			wantLimit(t, err, session.LimitSessionsPerTenant, "tenant has 3 sessions, the limit; delete one before creating another")
			if err := m.Delete(t.Context(), "a", ids[0]); err != nil {
				t.Fatal(err)
			}
			newSession(t, m, "a")
			if got := sessionIDs(t, m, "a"); len(got) != 3 {
				t.Fatalf("a has %d sessions", len(got))
			}
		})
	}
}

// A session asking for more than limits.max_tools, max_system_prompt_bytes,
// or retry overrides outside min_base_delay_ms and max_retries_cap (the
// defaults: 100 ms, 20) is refused with InvalidError naming the field and
// the limit; nothing is created. At the limits it is accepted.
func TestLimitSessionRequests(t *testing.T) {
	tools := func(n int) []provider.Tool {
		var out []provider.Tool
		for i := range n {
			out = append(out, provider.Tool{Name: "tool" + string(rune('a'+i))})
		}
		return out
	}
	dur := func(d time.Duration) *time.Duration { return &d }
	num := func(n int) *int { return &n }
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			m, _ := limited(t, store, session.Limits{MaxTools: 2, MaxSystemPromptBytes: 16}, retry.DefaultSettings())
			for _, tc := range []struct {
				name       string
				p          session.CreateParams
				field, msg string
			}{
				{"tools", session.CreateParams{Tools: tools(3)}, "tools", "has 3 tools, more than limits.max_tools (2)"},
				{"system prompt", session.CreateParams{SystemPrompt: strings.Repeat("x", 17)},
					"system_prompt", "is 17 bytes, more than limits.max_system_prompt_bytes (16)"},
				{"zero base delay", session.CreateParams{Retry: session.RetryOverrides{BaseDelay: dur(0)}},
					"retry.base_delay_ms", "0 is below limits.min_base_delay_ms (100)"},
				{"base delay below", session.CreateParams{Retry: session.RetryOverrides{BaseDelay: dur(99 * time.Millisecond)}},
					"retry.base_delay_ms", "99 is below limits.min_base_delay_ms (100)"},
				{"max retries above", session.CreateParams{Retry: session.RetryOverrides{MaxRetries: num(21)}},
					"retry.max_retries", "21 is above limits.max_retries_cap (20)"},
				// The hammer: no backoff, retries forever.
				{"hammer", session.CreateParams{Retry: session.RetryOverrides{MaxRetries: num(2147483647), BaseDelay: dur(0)}},
					"retry.base_delay_ms", "0 is below limits.min_base_delay_ms (100)"},
				{"hammer's retries", session.CreateParams{Retry: session.RetryOverrides{MaxRetries: num(2147483647)}},
					"retry.max_retries", "2147483647 is above limits.max_retries_cap (20)"},
			} {
				tc.p.Model = "sim/echo"
				_, err := m.Create(t.Context(), "t", tc.p)
				var inv *session.InvalidError
				if !errors.As(err, &inv) || inv.Field != tc.field || inv.Msg != tc.msg {
					t.Errorf("%s: error = %v; want %s: %s", tc.name, err, tc.field, tc.msg)
				}
			}
			if got := sessionIDs(t, m, "t"); len(got) != 0 || m.Count() != 0 {
				t.Fatalf("refused requests created %d sessions (%d in the registry)", len(got), m.Count())
			}
			// At the limits.
			s, err := m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo", Tools: tools(2),
				SystemPrompt: strings.Repeat("x", 16),
				Retry:        session.RetryOverrides{BaseDelay: dur(100 * time.Millisecond), MaxRetries: num(20)}})
			if err != nil {
				t.Fatal(err)
			}
			if st := s.State(); st.Retry.BaseDelay != 100*time.Millisecond || st.Retry.MaxRetries != 20 || len(st.Tools) != 2 {
				t.Fatalf("state = %+v", st)
			}
		})
	}
}

// refused checks that a prompt on s is refused at
// limits.max_concurrent_prompts_per_tenant (n running), and that nothing of
// s changed: its history, its state, its events (and, with a shared store,
// no lease taken).
func refused(t *testing.T, r *replicaT, s *session.Session, n string) {
	t.Helper()
	before, err := s.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, total0, err := s.Messages(t.Context(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Prompt(t.Context(), "refused [[faults: hang]]")
	wantLimit(t, err, session.LimitPromptsPerTenant, "tenant has "+n+" prompts running, the limit; wait for one's prompt_end")
	after, err := s.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, total, err := s.Messages(t.Context(), 0, 0); err != nil || total != total0 {
		t.Fatalf("history after a refused prompt: %d entries, was %d (%v)", total, total0, err)
	}
	if after.Status != session.StatusIdle || after.LastSeq != before.LastSeq || after.MessageCount != before.MessageCount {
		t.Fatalf("state after a refused prompt = %+v, was %+v", after, before)
	}
	if r != nil {
		if h, err := r.store.Holder(t.Context(), s.ID()); h != "" || err != nil {
			t.Fatalf("a refused prompt left a lease held by %q (%v)", h, err)
		}
	}
}

// A tenant with limits.max_concurrent_prompts_per_tenant prompts under way
// (streaming, or waiting in a retry's backoff) gets ErrLimit naming it for
// the next, and nothing changes; another tenant is not concerned. The slot
// frees on every ending path: completed, failed, aborted, retry aborted,
// session deleted, shutdown.
func TestLimitConcurrentPrompts(t *testing.T) {
	settings := retry.Settings{Enabled: true, MaxRetries: 3, BaseDelay: time.Hour}
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			m, r := limited(t, store, session.Limits{MaxConcurrentPromptsPerTenant: 2}, settings)
			s1, s2, s3, s4 := newSession(t, m, "t"), newSession(t, m, "t"), newSession(t, m, "t"), newSession(t, m, "t")
			other := newSession(t, m, "other")

			// Completed and failed prompts free their slots: more of them
			// than the limit, one after the other.
			for _, text := range []string{"one", "two", "three [[faults: 400]]", "four [[faults: 401]]"} {
				promptToEnd(t, s1, text)
			}

			// Two under way: one streaming, one in backoff.
			_, sub1, err := s1.Prompt(t.Context(), "hang [[faults: hang]]")
			if err != nil {
				t.Fatal(err)
			}
			defer sub1.Close()
			_, sub2, err := s2.Prompt(t.Context(), "backoff [[faults: 503,ok]]")
			if err != nil {
				t.Fatal(err)
			}
			defer sub2.Close()
			until(t, sub2, session.EventAutoRetryStart)
			refused(t, r, s3, "2")
			// Another tenant prompts as it likes.
			if end := last(promptToEnd(t, other, "mine")); end.Outcome != session.OutcomeCompleted {
				t.Fatalf("other tenant's prompt_end = %+v", end)
			}

			// Aborted: the slot is free once prompt_end is out.
			if err := s1.Abort(t.Context()); err != nil {
				t.Fatal(err)
			}
			until(t, sub1, session.EventPromptEnd)
			_, sub3, err := s3.Prompt(t.Context(), "hang [[faults: hang]]")
			if err != nil {
				t.Fatalf("Prompt after an abort: %v", err)
			}
			defer sub3.Close()
			refused(t, r, s4, "2")

			// The retry aborted in its backoff.
			if err := s2.AbortRetry(t.Context()); err != nil {
				t.Fatal(err)
			}
			until(t, sub2, session.EventPromptEnd)
			_, sub4, err := s4.Prompt(t.Context(), "hang [[faults: hang]]")
			if err != nil {
				t.Fatalf("Prompt after an aborted retry: %v", err)
			}
			defer sub4.Close()
			refused(t, r, s1, "2")

			// The session deleted while its prompt runs.
			if err := m.Delete(t.Context(), "t", s3.ID()); err != nil {
				t.Fatal(err)
			}
			_, sub1, err = s1.Prompt(t.Context(), "hang [[faults: hang]]")
			if err != nil {
				t.Fatalf("Prompt after a delete: %v", err)
			}
			defer sub1.Close()
			refused(t, r, s2, "2")

			// Shutdown ends both.
			if store == "memory" {
				if n := session.RunningPrompts(m, "t"); n != 2 {
					t.Fatalf("%d prompts counted before Close", n)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				if err := m.Close(ctx); err != nil {
					t.Fatal(err)
				}
				if n := session.RunningPrompts(m, "t"); n != 0 {
					t.Fatalf("%d prompts counted after Close", n)
				}
			}
			// (With a shared store, TestReplicasLimitPromptsFreedOnShutdown.)
		})
	}
}

// A session whose history holds limits.max_history_bytes takes no more
// prompts: ErrLimit naming it, the history, the events and the lease as
// they were, the tenant's prompt slot free again (another session of the
// tenant prompts at once, with one slot in all). Reading it and deleting
// it still work.
func TestLimitHistoryBytes(t *testing.T) {
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			m, r := limited(t, store, session.Limits{MaxHistoryBytes: 5000, MaxConcurrentPromptsPerTenant: 1}, retry.DefaultSettings())
			s := newSession(t, m, "t")
			text := strings.Repeat("x", 1000)
			prompts := 0
			for ; prompts < 10; prompts++ {
				before, err := s.Snapshot(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				_, total0, _ := s.Messages(t.Context(), 0, 0)
				_, sub, err := s.Prompt(t.Context(), text)
				if err == nil {
					readUntilEnd(t, sub)
					sub.Close()
					continue
				}
				var le *session.LimitError
				if !errors.As(err, &le) || le.Limit != session.LimitHistoryBytes ||
					!strings.HasPrefix(err.Error(), "limits.max_history_bytes: the session's history holds ") ||
					!strings.HasSuffix(err.Error(), " bytes, the limit is 5000; start a new session") {
					t.Fatalf("prompt %d: %v; want the history limit named", prompts+1, err)
				}
				after, _ := s.Snapshot(t.Context())
				if _, total, _ := s.Messages(t.Context(), 0, 0); total != total0 || after.LastSeq != before.LastSeq || after.Status != session.StatusIdle {
					t.Fatalf("refused prompt changed the session: %d entries (was %d), %+v (was %+v)", total, total0, after, before)
				}
				if r != nil {
					if h, err := r.store.Holder(t.Context(), s.ID()); h != "" || err != nil {
						t.Fatalf("a refused prompt left a lease held by %q (%v)", h, err)
					}
				}
				break
			}
			// Each prompt adds about 2.3 KB (a 1000-byte message and its
			// echo): the third passes 5000.
			if prompts != 3 {
				t.Fatalf("refused after %d prompts; want 3", prompts)
			}
			if end := last(promptToEnd(t, newSession(t, m, "t"), "fits")); end.Outcome != session.OutcomeCompleted {
				t.Fatalf("another session of the tenant: %+v", end)
			}
			if err := m.Delete(t.Context(), "t", s.ID()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A tool loop stops growing the history at limits.max_history_bytes too:
// the prompt ends failed, naming the limit, after the turn whose results
// passed it (stored, so the conversation stays well-formed), not after
// its last turn.
func TestLimitHistoryBytesEndsAToolLoop(t *testing.T) {
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			m, _ := limited(t, store, session.Limits{MaxHistoryBytes: 5000}, retry.DefaultSettings())
			s, err := m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo",
				Tools: []provider.Tool{{Name: "fetch", InputSchema: []byte(`{"type":"object"}`)}}})
			if err != nil {
				t.Fatal(err)
			}
			_, sub, err := s.Prompt(t.Context(), "[[tools: fetch > fetch > fetch > fetch > fetch]]")
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			calls := 0
			for {
				e, err := sub.Next(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if e.Type == session.EventToolCall {
					calls++
					if err := s.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: e.ToolCall.CallID, Content: strings.Repeat("r", 1500)}}); err != nil {
						t.Fatal(err)
					}
				}
				if e.Type == session.EventPromptEnd {
					if e.Outcome != session.OutcomeFailed || !strings.HasPrefix(e.Error, "limits.max_history_bytes: the session's history holds ") {
						t.Fatalf("prompt_end = %+v; want failed naming the history's limit", e)
					}
					break
				}
			}
			// Each turn adds its call and a 1500-byte result: the third's
			// results pass 5000.
			if calls != 3 {
				t.Fatalf("%d tool turns ran; want 3 of the 5", calls)
			}
			entries, _, err := s.Messages(t.Context(), 0, 100)
			if err != nil || entries[len(entries)-1].Message.Role != provider.RoleTool {
				t.Fatalf("the history ends with %+v (%v); want the last turn's results", entries[len(entries)-1].Message.Role, err)
			}
		})
	}
}
