package chat

import (
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Event constructors for the tests.
func evAgentStart() *agentdv1.Event {
	return &agentdv1.Event{Type: "agent_start", PromptId: "prm_1", Payload: &agentdv1.Event_AgentStart{AgentStart: &agentdv1.AgentStart{PromptId: "prm_1"}}}
}

func evMessageStart(model string) *agentdv1.Event {
	return &agentdv1.Event{Type: "message_start", PromptId: "prm_1", Payload: &agentdv1.Event_MessageStart{MessageStart: &agentdv1.MessageStart{Role: "assistant", Model: model}}}
}

func evText(s string) *agentdv1.Event {
	return &agentdv1.Event{Type: "message_update", PromptId: "prm_1", Payload: &agentdv1.Event_MessageUpdate{MessageUpdate: &agentdv1.MessageUpdate{TextDelta: s}}}
}

func evThinking(s string) *agentdv1.Event {
	return &agentdv1.Event{Type: "message_update", PromptId: "prm_1", Payload: &agentdv1.Event_MessageUpdate{MessageUpdate: &agentdv1.MessageUpdate{ThinkingDelta: s}}}
}

func evMessageEnd(stop, errMsg, text string) *agentdv1.Event {
	return &agentdv1.Event{Type: "message_end", PromptId: "prm_1", Payload: &agentdv1.Event_MessageEnd{MessageEnd: &agentdv1.MessageEnd{StopReason: stop, ErrorMessage: errMsg, Text: text}}}
}

func evAgentEnd() *agentdv1.Event {
	return &agentdv1.Event{Type: "agent_end", PromptId: "prm_1", Payload: &agentdv1.Event_AgentEnd{AgentEnd: &agentdv1.AgentEnd{}}}
}

func evRetryStart(attempt, maxAttempts int32, delayMs int64, errMsg string) *agentdv1.Event {
	return &agentdv1.Event{Type: "auto_retry_start", PromptId: "prm_1", Payload: &agentdv1.Event_AutoRetryStart{AutoRetryStart: &agentdv1.AutoRetryStart{
		Attempt: attempt, MaxAttempts: maxAttempts, DelayMs: delayMs, ErrorMessage: errMsg, ErrorClass: "transient", DelaySource: "estimate"}}}
}

func evRetryEnd(success bool, attempt int32, finalError string) *agentdv1.Event {
	return &agentdv1.Event{Type: "auto_retry_end", PromptId: "prm_1", Payload: &agentdv1.Event_AutoRetryEnd{AutoRetryEnd: &agentdv1.AutoRetryEnd{Success: success, Attempt: attempt, FinalError: finalError}}}
}

func evPromptEnd(outcome, errText string) *agentdv1.Event {
	return &agentdv1.Event{Type: "prompt_end", PromptId: "prm_1", Payload: &agentdv1.Event_PromptEnd{PromptEnd: &agentdv1.PromptEnd{Outcome: outcome, Error: errText}}}
}

func evToolCall(id, name string) *agentdv1.Event {
	in, _ := structpb.NewValue(map[string]any{"city": "Paris", "days": 2})
	return &agentdv1.Event{Type: "tool_call", PromptId: "prm_1", Payload: &agentdv1.Event_ToolCall{ToolCall: &agentdv1.ToolCall{CallId: id, Name: name, Input: in}}}
}

func line(k Kind, s string) Piece   { return Piece{Kind: k, Text: s} }
func inline(k Kind, s string) Piece { return Piece{Kind: k, Text: s, Inline: true} }

func equalPieces(t *testing.T, what string, got, want []Piece) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d pieces %+v, want %d %+v", what, len(got), got, len(want), want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: piece %d = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

// TestRendererEveryEvent feeds each event type and checks the exact output.
func TestRendererEveryEvent(t *testing.T) {
	tests := []struct {
		name string
		ev   *agentdv1.Event
		want []Piece
	}{
		{"agent_start", evAgentStart(), nil},
		{"message_start", evMessageStart("sim/echo"), nil},
		{"text delta", evText("echo: "), []Piece{inline(KindText, "echo: ")}},
		{"thinking delta", evThinking("hmm"), []Piece{inline(KindThinking, "thinking: "), inline(KindThinking, "hmm")}},
		{"message_end stop", evMessageEnd("stop", "", ""), nil},
		{"message_end error", evMessageEnd("error", "529 overloaded_error: Overloaded", ""), nil},
		{"message_end length", evMessageEnd("length", "", ""), []Piece{line(KindNotice, "(the answer stopped at the output token limit)")}},
		{"message_end, text not streamed", evMessageEnd("stop", "", "whole answer"), []Piece{inline(KindText, "whole answer"), inline(KindText, "\n")}},
		{"tool_call", evToolCall("call_1", "get_weather"), []Piece{line(KindTool, `Tool call get_weather {"city":"Paris","days":2} [call_1]`)}},
		{"agent_end", evAgentEnd(), nil},
		{"auto_retry_start", evRetryStart(1, 10, 478, "529 overloaded_error: Overloaded"),
			[]Piece{line(KindRetry, "[retry 1/10 in 0.5s: 529 overloaded_error: Overloaded]")}},
		{"auto_retry_end success", evRetryEnd(true, 2, ""), []Piece{line(KindRetry, "[retry succeeded on attempt 2]")}},
		{"auto_retry_end failure", evRetryEnd(false, 3, "529 overloaded_error: Overloaded"),
			[]Piece{line(KindError, "Retry failed after 3 attempts: 529 overloaded_error: Overloaded")}},
		{"auto_retry_end cancelled", evRetryEnd(false, 1, "Retry cancelled"),
			[]Piece{line(KindError, "Retry failed after 1 attempt: Retry cancelled")}},
		{"retry_fallback_applied", &agentdv1.Event{Type: "retry_fallback_applied", Payload: &agentdv1.Event_RetryFallbackApplied{
			RetryFallbackApplied: &agentdv1.RetryFallbackApplied{From: "anthropic/claude-sonnet-4-5", To: "openai/gpt-5", Role: "default"}}},
			[]Piece{line(KindNotice, "Fallback: anthropic/claude-sonnet-4-5 -> openai/gpt-5")}},
		{"retry_fallback_succeeded", &agentdv1.Event{Type: "retry_fallback_succeeded", Payload: &agentdv1.Event_RetryFallbackSucceeded{
			RetryFallbackSucceeded: &agentdv1.RetryFallbackSucceeded{Model: "openai/gpt-5", Role: "default"}}},
			[]Piece{line(KindNotice, "Fallback succeeded on openai/gpt-5")}},
		{"model_change", &agentdv1.Event{Type: "model_change", Payload: &agentdv1.Event_ModelChange{
			ModelChange: &agentdv1.ModelChange{From: "openai/gpt-5", To: "anthropic/claude-sonnet-4-5", Reason: "revert"}}},
			[]Piece{line(KindNotice, "Model changed: openai/gpt-5 -> anthropic/claude-sonnet-4-5 (revert)")}},
		{"credential_switched", &agentdv1.Event{Type: "credential_switched", Payload: &agentdv1.Event_CredentialSwitched{
			CredentialSwitched: &agentdv1.CredentialSwitched{Provider: "anthropic", From: "team-a", To: "team-b"}}},
			[]Piece{line(KindNotice, "Credential switched: anthropic team-a -> team-b")}},
		{"context_overflow", &agentdv1.Event{Type: "context_overflow", Payload: &agentdv1.Event_ContextOverflow{
			ContextOverflow: &agentdv1.ContextOverflow{ErrorMessage: "prompt is too long: 205351 tokens > 200000 maximum"}}},
			[]Piece{line(KindError, "Context overflow: the conversation no longer fits the model's context window; not retried: prompt is too long: 205351 tokens > 200000 maximum")}},
		{"prompt_end completed", evPromptEnd("completed", ""), nil},
		{"prompt_end failed", evPromptEnd("failed", "401 authentication_error: invalid x-api-key"),
			[]Piece{line(KindError, "Prompt failed: 401 authentication_error: invalid x-api-key")}},
		{"prompt_end aborted", evPromptEnd("aborted", "aborted"), []Piece{line(KindError, "Prompt aborted.")}},
		{"prompt_end aborted by a cancelled retry", evPromptEnd("aborted", "Retry cancelled"), []Piece{line(KindError, "Prompt aborted: Retry cancelled")}},
		{"unknown event", &agentdv1.Event{Type: "compaction_start"}, []Piece{line(KindInfo, "[compaction_start]")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Renderer
			equalPieces(t, tt.name, r.Apply(tt.ev, t0), tt.want)
		})
	}
}

// TestRendererRetryLoader follows a retry chain: the loader appears at
// auto_retry_start with the exact text, counts down with the injected clock,
// hides when the retried call starts, and the chain state ends at
// auto_retry_end.
func TestRendererRetryLoader(t *testing.T) {
	var r Renderer
	r.Apply(evAgentStart(), t0)
	r.Apply(evMessageStart("sim/echo"), t0)
	r.Apply(evMessageEnd("error", "429 rate_limit_error: slow down", ""), t0)
	r.Apply(evAgentEnd(), t0)
	if _, ok := r.Loader(t0); ok || r.Retrying() {
		t.Fatal("loader before auto_retry_start")
	}
	equalPieces(t, "auto_retry_start", r.Apply(evRetryStart(2, 10, 3000, "429 rate_limit_error: slow down"), t0),
		[]Piece{line(KindRetry, "[retry 2/10 in 3s: 429 rate_limit_error: slow down]")})
	for _, c := range []struct {
		after time.Duration
		want  string
	}{
		{0, "Retrying (2/10) in 3s… (esc to cancel)"},
		{50 * time.Millisecond, "Retrying (2/10) in 3s… (esc to cancel)"},
		{999 * time.Millisecond, "Retrying (2/10) in 2.1s… (esc to cancel)"},
		{time.Second, "Retrying (2/10) in 2s… (esc to cancel)"},
		{2500 * time.Millisecond, "Retrying (2/10) in 0.5s… (esc to cancel)"},
		{2950 * time.Millisecond, "Retrying (2/10) in 0.1s… (esc to cancel)"},
		{3 * time.Second, "Retrying (2/10) in 0s… (esc to cancel)"},
		{5 * time.Second, "Retrying (2/10) in 0s… (esc to cancel)"},
	} {
		got, ok := r.Loader(t0.Add(c.after))
		if !ok || got != c.want {
			t.Errorf("loader after %v = %q, %v; want %q", c.after, got, ok, c.want)
		}
	}
	if !r.Retrying() || !r.Waiting() || !r.Busy() {
		t.Fatalf("retrying %v waiting %v busy %v during the backoff", r.Retrying(), r.Waiting(), r.Busy())
	}
	// The retried call starts: the loader goes, the chain stays open (Esc
	// still cancels it).
	r.Apply(evAgentStart(), t0.Add(3*time.Second))
	if _, ok := r.Loader(t0.Add(3 * time.Second)); ok || !r.Retrying() {
		t.Fatalf("after the retried call started: loader %v, retrying %v", ok, r.Retrying())
	}
	if a, n := r.Attempt(); a != 2 || n != 10 {
		t.Fatalf("attempt %d/%d", a, n)
	}
	r.Apply(evMessageStart("sim/echo"), t0)
	equalPieces(t, "answer", r.Apply(evText("ok"), t0), []Piece{inline(KindText, "ok")})
	equalPieces(t, "message_end", r.Apply(evMessageEnd("stop", "", "ok"), t0), []Piece{inline(KindText, "\n")})
	r.Apply(evRetryEnd(true, 2, ""), t0)
	if r.Retrying() || r.Waiting() {
		t.Fatal("chain still open after auto_retry_end")
	}
	r.Apply(evPromptEnd("completed", ""), t0)
	if r.Busy() {
		t.Fatal("busy after prompt_end")
	}
}

func TestLoaderText(t *testing.T) {
	for _, c := range []struct {
		remaining time.Duration
		want      string
	}{
		{3 * time.Second, "Retrying (2/10) in 3s… (esc to cancel)"},
		// A sub-second wait shows as such, not as "1s".
		{400 * time.Millisecond, "Retrying (2/10) in 0.4s… (esc to cancel)"},
		{478 * time.Millisecond, "Retrying (2/10) in 0.5s… (esc to cancel)"},
		{time.Millisecond, "Retrying (2/10) in 0.1s… (esc to cancel)"},
		{0, "Retrying (2/10) in 0s… (esc to cancel)"},
		{-time.Second, "Retrying (2/10) in 0s… (esc to cancel)"},
		{9960 * time.Millisecond, "Retrying (2/10) in 10s… (esc to cancel)"},
		{10001 * time.Millisecond, "Retrying (2/10) in 11s… (esc to cancel)"},
		{90 * time.Second, "Retrying (2/10) in 90s… (esc to cancel)"},
	} {
		if got := LoaderText(2, 10, c.remaining); got != c.want {
			t.Errorf("LoaderText(%v) = %q, want %q", c.remaining, got, c.want)
		}
	}
	for n, want := range map[int32]string{
		0:  "Retry failed after 0 attempts: 529 overloaded_error: Overloaded",
		1:  "Retry failed after 1 attempt: 529 overloaded_error: Overloaded",
		10: "Retry failed after 10 attempts: 529 overloaded_error: Overloaded",
	} {
		if got := RetryFailedText(n, "529 overloaded_error: Overloaded"); got != want {
			t.Errorf("RetryFailedText(%d) = %q, want %q", n, got, want)
		}
	}
}

// A chain that fails fast (its first wait exceeds retry.max_delay_ms) has
// no auto_retry_start: a retry line still says what happened, before the
// failure.
func TestRetryFailFastLine(t *testing.T) {
	r := &Renderer{}
	t0 := time.Now()
	r.Apply(evAgentStart(), t0)
	r.Apply(evMessageStart("sim/echo"), t0)
	r.Apply(evMessageEnd("error", "429 insufficient_quota: You exceeded your current quota", ""), t0)
	final := "Estimated 1800000ms wait, exceeds retry.maxDelayMs (300000ms). Original error: 429 insufficient_quota: You exceeded your current quota"
	equalPieces(t, "auto_retry_end", r.Apply(evRetryEnd(false, 1, final), t0), []Piece{
		line(KindRetry, "[retry 1 not started: Estimated 30m0s wait, exceeds retry.maxDelayMs (5m0s)]"),
		line(KindError, "Retry failed after 1 attempt: "+final),
	})
	// After retries that started, the end is the failure alone.
	r.Apply(evRetryStart(1, 10, 400, "529 overloaded_error: Overloaded"), t0)
	equalPieces(t, "auto_retry_end after a start", r.Apply(evRetryEnd(false, 2, "529 overloaded_error: Overloaded"), t0),
		[]Piece{line(KindError, "Retry failed after 2 attempts: 529 overloaded_error: Overloaded")})
}

func TestFormatDelay(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "0s", -5: "0s", 8: "0.01s", 10: "0.01s", 55: "0.06s", 100: "0.1s", 478: "0.5s", 500: "0.5s",
		1000: "1s", 1450: "1.5s", 2000: "2s", 8000: "8s", 9960: "10s", 30000: "30s", 90000: "1m30s", 18000000: "5h0m0s",
	} {
		if got := FormatDelay(ms); got != want {
			t.Errorf("FormatDelay(%d) = %q, want %q", ms, got, want)
		}
	}
}

// TestRendererLines: streamed text and thinking share no line with whole
// lines, and a line is ended before a notice.
func TestRendererLines(t *testing.T) {
	var r Renderer
	var out []Piece
	for _, ev := range []*agentdv1.Event{
		evAgentStart(), evMessageStart("sim/echo"),
		evThinking("let me "), evThinking("see"),
		evText("echo: "), evText("hi\nthere"),
		evToolCall("call_1", "get_weather"),
		evMessageEnd("toolUse", "", ""),
		evText("partial"),
		evRetryStart(1, 10, 500, "overloaded"),
		evPromptEnd("failed", "boom"),
	} {
		out = append(out, r.Apply(ev, t0)...)
	}
	want := "thinking: let me see\n" +
		"echo: hi\nthere\n" +
		`Tool call get_weather {"city":"Paris","days":2} [call_1]` + "\n" +
		"partial\n" +
		"[retry 1/10 in 0.5s: overloaded]\n" +
		"Prompt failed: boom\n"
	if got := String(out); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	// Reset after a lost stream ends the open line and the state.
	r.Apply(evText("cut"), t0)
	r.Apply(evRetryStart(1, 10, 500, "x"), t0)
	r.Apply(evText("again"), t0)
	equalPieces(t, "reset", r.Reset(), []Piece{inline(KindText, "\n")})
	if r.Busy() || r.Retrying() || r.Waiting() {
		t.Fatal("state after Reset")
	}
}

func TestRenderMessageAndHeader(t *testing.T) {
	in, _ := structpb.NewValue(map[string]any{"city": "Paris"})
	history := []*agentdv1.Message{
		{Role: "user", Content: []*agentdv1.ContentBlock{{Type: "text", Text: "hello [[faults: 529,ok]]"}}},
		{Role: "assistant", StopReason: "error", ErrorMessage: "529 overloaded_error: Overloaded"},
		{Role: "model_change", ModelChange: &agentdv1.ModelChange{From: "sim/echo", To: "sim/backup", Reason: "fallback"}},
		{Role: "assistant", StopReason: "toolUse", Content: []*agentdv1.ContentBlock{
			{Type: "thinking", Text: "hmm"}, {Type: "redacted_thinking"}, {Type: "text", Text: "line 1\nline 2"},
			{Type: "tool_call", ToolCallId: "call_1", ToolName: "get_weather", ToolInput: in}}},
		{Role: "tool", Content: []*agentdv1.ContentBlock{{Type: "tool_result", ToolCallId: "call_1", Text: "sunny"}, {Type: "tool_result", ToolCallId: "call_2", Text: "no", IsError: true}}},
		{Role: "assistant", StopReason: "aborted", ErrorMessage: "Request was aborted"},
	}
	sess := &agentdv1.Session{Id: "ses_1", Model: "sim/echo", Status: "idle", MessageCount: 40}
	want := "Session ses_1 (sim/echo), 40 history entries, idle\n" +
		"… the latest 6:\n" +
		"> hello [[faults: 529,ok]]\n" +
		"Error: 529 overloaded_error: Overloaded\n" +
		"Model changed: sim/echo -> sim/backup (fallback)\n" +
		"thinking: hmm\nthinking: [redacted]\nline 1\nline 2\n" +
		`Tool call get_weather {"city":"Paris"} [call_1]` + "\n" +
		"Tool result get_weather [call_1]: sunny\nTool error [call_2]: no\n" +
		"Aborted: Request was aborted\n" +
		"---\n"
	if got := String(Header(sess, history, true)); got != want {
		t.Errorf("header:\n%s\nwant:\n%s", got, want)
	}
	if got, want := String(Header(sess, nil, false)), "Session ses_1 (sim/echo)\n"; got != want {
		t.Errorf("header of a new session = %q, want %q", got, want)
	}
}
