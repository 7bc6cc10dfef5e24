package session_test

import (
	"context"
	"errors"
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

func toolManager(t *testing.T, rec *recorder) *session.Manager {
	t.Helper()
	m := session.NewManager(session.Options{
		Providers:         []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Client: rec}},
		Retry:             retry.DefaultSettings(),
		Rand:              func() float64 { return 1 },
		ToolResultTimeout: time.Minute,
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

func createWithTools(t *testing.T, m *session.Manager, names ...string) *session.Session {
	t.Helper()
	var tools []provider.Tool
	for _, n := range names {
		tools = append(tools, provider.Tool{Name: n, Description: "test tool", InputSchema: []byte(`{"type":"object"}`)})
	}
	s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo", Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// answerTools reads events until prompt_end, answering every tool_call
// with "<name>-result", and returns the events.
func answerTools(t *testing.T, s *session.Session, sub *session.Subscription) []session.Event {
	t.Helper()
	var evs []session.Event
	for {
		e, err := sub.Next(context.Background())
		if err != nil {
			t.Fatalf("Next after %s: %v", kinds(evs), err)
		}
		evs = append(evs, e)
		switch e.Type {
		case session.EventToolCall:
			if err := s.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: e.ToolCall.CallID, Content: e.ToolCall.Name + "-result"}}); err != nil {
				t.Fatalf("SubmitToolResults: %v", err)
			}
		case session.EventPromptEnd:
			return evs
		}
	}
}

func TestToolLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{Provider: sim.New(sim.Options{})}
		m := toolManager(t, rec)
		s := createWithTools(t, m, "get_weather")
		_, sub, err := s.Prompt(context.Background(), "weather in Paris? [[tools: get_weather]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		evs := answerTools(t, s, sub)
		want := "agent_start,message_start,message_update,message_end,tool_call," +
			"message_start,message_update,message_end,agent_end,prompt_end"
		if got := kinds(evs); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
		tc := only(evs, session.EventToolCall)[0].ToolCall
		if tc.Name != "get_weather" || string(tc.Input) != `{"text":"weather in Paris?"}` {
			t.Fatalf("tool_call = %+v", tc)
		}
		// Tool-call deltas streamed as the call formed.
		var args string
		for _, e := range only(evs, session.EventMessageUpdate) {
			if d := e.ToolCallDelta; d != nil && d.CallID == tc.CallID {
				args += d.InputDelta
			}
		}
		if args != string(tc.Input) {
			t.Fatalf("streamed tool input %q, want %q", args, tc.Input)
		}
		ends := only(evs, session.EventMessageEnd)
		if ends[0].StopReason != provider.StopToolUse || ends[1].Text != "echo: weather in Paris? (tools: get_weather=get_weather-result)" {
			t.Fatalf("message_end = %+v / %+v", ends[0], ends[1])
		}
		// The history holds the call and the result in order.
		entries, total, _ := s.Messages(context.Background(), 0, 100)
		if total != 4 || entries[1].Message.Content[0].Type != provider.BlockToolCall ||
			entries[2].Message.Role != provider.RoleTool || entries[2].Message.Content[0].Text != "get_weather-result" ||
			entries[3].Message.StopReason != provider.StopEnd {
			t.Fatalf("history = %+v", entries)
		}
		// The second call saw the tool call and its result.
		if reqs := rec.requests(); len(reqs) != 2 || len(reqs[1].Messages) != 3 || reqs[1].Tools[0].Name != "get_weather" {
			t.Fatalf("second request = %+v", reqs)
		}
	})
}

func TestToolLoopMultiStepParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := toolManager(t, &recorder{Provider: sim.New(sim.Options{})})
		s := createWithTools(t, m, "a", "b", "c")
		_, sub, err := s.Prompt(context.Background(), "go [[tools: a, b > c]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		evs := answerTools(t, s, sub)
		var names []string
		for _, e := range only(evs, session.EventToolCall) {
			names = append(names, e.ToolCall.Name)
		}
		if strings.Join(names, ",") != "a,b,c" {
			t.Fatalf("tool calls = %v", names)
		}
		ends := only(evs, session.EventMessageEnd)
		if got := ends[len(ends)-1].Text; got != "echo: go (tools: a=a-result; b=b-result; c=c-result)" {
			t.Fatalf("answer = %q", got)
		}
		if n := len(only(evs, session.EventAgentStart)); n != 1 {
			t.Fatalf("%d runs, want one run bracketing every turn", n)
		}
	})
}

func TestToolLoopRetryOnSecondCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{Provider: sim.New(sim.Options{})}
		m := toolManager(t, rec)
		s := createWithTools(t, m, "t")
		_, sub, err := s.Prompt(context.Background(), "x [[tools: t]] [[faults: ok,529,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		evs := answerTools(t, s, sub)
		want := "agent_start,message_start,message_update,message_end,tool_call,message_start,message_end,agent_end,auto_retry_start," +
			"agent_start,message_start,message_update,message_end,auto_retry_end,agent_end,prompt_end"
		if got := kinds(evs); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
		// The retried call resends the tool call and result, not the error.
		reqs := rec.requests()
		retried := reqs[2].Messages
		if len(retried) != 3 || retried[2].Role != provider.RoleTool {
			t.Fatalf("retried context = %+v", retried)
		}
		if last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", last(evs))
		}
	})
}

func TestRecoveredTurnToolsRunBeforePromptEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := toolManager(t, &recorder{Provider: sim.New(sim.Options{})})
		s := createWithTools(t, m, "t")
		_, sub, err := s.Prompt(context.Background(), "x [[tools: t]] [[faults: 503,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		evs := answerTools(t, s, sub)
		// auto_retry_end at the recovered turn's message_end, its tool call
		// after, prompt_end only once the model has finished.
		want := "agent_start,message_start,message_end,agent_end,auto_retry_start," +
			"agent_start,message_start,message_update,message_end,auto_retry_end,tool_call,message_start,message_update,message_end,agent_end,prompt_end"
		if got := kinds(evs); got != want {
			t.Fatalf("events:\n got %s\nwant %s", got, want)
		}
	})
}

func TestFailureAfterCompletedToolCallIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := toolManager(t, &recorder{Provider: sim.New(sim.Options{})})
		s := createWithTools(t, m, "write_file")
		_, sub, err := s.Prompt(context.Background(), "x [[tools: write_file]] [[faults: midstream,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		evs := answerTools(t, s, sub)
		if len(only(evs, session.EventAutoRetryStart)) != 0 || len(only(evs, session.EventToolCall)) != 0 {
			t.Fatalf("a failed turn with a completed tool call was replayed or run: %s", kinds(evs))
		}
		me := only(evs, session.EventMessageEnd)[0]
		if me.StopReason != provider.StopError || me.ErrorClass != "not_retryable" || last(evs).Outcome != session.OutcomeFailed {
			t.Fatalf("message_end = %+v, prompt_end = %+v", me, last(evs))
		}
	})
}

func TestBadToolResultsChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := toolManager(t, &recorder{Provider: sim.New(sim.Options{})})
		s := createWithTools(t, m, "a", "b")
		if err := s.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: "x"}}); !errors.Is(err, session.ErrNotWaiting) {
			t.Fatalf("results while idle: %v", err)
		}
		_, sub, err := s.Prompt(context.Background(), "x [[tools: a,b]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		var calls []*session.ToolCall
		for len(calls) < 2 {
			calls = append(calls, waitFor(t, sub, session.EventToolCall).ToolCall)
		}
		a, b := calls[0].CallID, calls[1].CallID
		for _, tc := range []struct {
			results []session.ToolResult
			want    string
		}{
			{nil, "results: is empty"},
			{[]session.ToolResult{{CallID: ""}}, "results[0].call_id: is required"},
			{[]session.ToolResult{{CallID: a}, {CallID: "nope"}}, `results[1].call_id: unknown call id "nope"`},
			{[]session.ToolResult{{CallID: a}, {CallID: a}}, "already submitted"},
		} {
			err := s.SubmitToolResults(t.Context(), tc.results)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SubmitToolResults(%+v) = %v, want %q", tc.results, err, tc.want)
			}
			if p := s.State().PendingToolCalls; len(p) != 2 {
				t.Fatalf("a rejected submission changed the pending calls: %+v", p)
			}
		}
		// One at a time works; a repeat is refused.
		if err := s.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: a, Content: "1"}}); err != nil {
			t.Fatal(err)
		}
		if p := s.State().PendingToolCalls; len(p) != 1 || p[0].CallID != b {
			t.Fatalf("pending after one result = %+v", p)
		}
		if err := s.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: a}}); err == nil {
			t.Fatal("second result for the same call accepted")
		}
		if err := s.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: b, Content: "2", IsError: true}}); err != nil {
			t.Fatal(err)
		}
		evs := readUntilEnd(t, sub)
		ends := only(evs, session.EventMessageEnd)
		if got := ends[len(ends)-1].Text; got != "echo: x (tools: a=1; b=error: 2)" {
			t.Fatalf("answer = %q", got)
		}
	})
}

func TestToolResultTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := toolManager(t, &recorder{Provider: sim.New(sim.Options{})})
		s := createWithTools(t, m, "slow")
		start := time.Now()
		evs := prompt(t, m, s, "x [[tools: slow]]")
		pe := last(evs)
		if pe.Outcome != session.OutcomeFailed || !strings.HasPrefix(pe.Error, "no tool results within 1m0s (waiting for call_") {
			t.Fatalf("prompt_end = %+v", pe)
		}
		if time.Since(start) != time.Minute {
			t.Fatalf("gave up after %v", time.Since(start))
		}
		// The unanswered call got an error result: the next prompt's context is well-formed.
		entries, _, _ := s.Messages(context.Background(), 0, 100)
		tr := entries[2].Message
		if tr.Role != provider.RoleTool || !tr.Content[0].IsError {
			t.Fatalf("tool result entry = %+v", tr)
		}
		if st := s.State(); st.Status != session.StatusIdle || len(st.PendingToolCalls) != 0 {
			t.Fatalf("state = %+v", st)
		}
	})
}

func TestAbortWhileWaitingForTools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := toolManager(t, &recorder{Provider: sim.New(sim.Options{})})
		s := createWithTools(t, m, "t")
		_, sub, err := s.Prompt(context.Background(), "x [[tools: t]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		waitFor(t, sub, session.EventToolCall)
		if st := s.State(); st.Status != session.StatusStreaming || len(st.PendingToolCalls) != 1 {
			t.Fatalf("state while waiting = %+v", st)
		}
		if _, _, err := s.Prompt(context.Background(), "another"); err == nil {
			t.Fatal("a prompt was accepted while the run waits for tools")
		}
		if err := s.Abort(context.Background()); err != nil {
			t.Fatal(err)
		}
		evs := readUntilEnd(t, sub)
		if last(evs).Outcome != session.OutcomeAborted {
			t.Fatalf("prompt_end = %+v", last(evs))
		}
	})
}

func TestManySessionsInToolLoops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 300
		// n prompts of one tenant at once: more than its default limit.
		m := session.NewManager(session.Options{
			Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated,
				Client: &recorder{Provider: sim.New(sim.Options{TokenDelay: time.Millisecond})}}},
			Retry:             retry.DefaultSettings(),
			Rand:              func() float64 { return 1 },
			ToolResultTimeout: time.Minute,
			Limits:            session.Limits{MaxConcurrentPromptsPerTenant: n},
		})
		t.Cleanup(func() { m.Close(context.Background()) })
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo",
					Tools: []provider.Tool{{Name: "a"}, {Name: "b"}}})
				if err != nil {
					errs <- err
					return
				}
				_, sub, err := s.Prompt(context.Background(), fmt.Sprintf("n%d [[tools: a > b]] [[faults: ok,500,ok,ok]]", i))
				if err != nil {
					errs <- err
					return
				}
				defer sub.Close()
				for {
					e, err := sub.Next(context.Background())
					if err != nil {
						errs <- err
						return
					}
					if e.Type == session.EventToolCall {
						if err := s.SubmitToolResults(t.Context(), []session.ToolResult{{CallID: e.ToolCall.CallID, Content: "ok"}}); err != nil {
							errs <- err
							return
						}
					}
					if e.Type == session.EventPromptEnd {
						if e.Outcome != session.OutcomeCompleted {
							errs <- fmt.Errorf("session %d: %+v", i, e)
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
