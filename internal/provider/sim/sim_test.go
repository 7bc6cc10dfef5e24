package sim

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

const (
	firstDelay = 200 * time.Millisecond
	tokenDelay = 10 * time.Millisecond
)

// request is a call carrying one user message.
func request(text string, call int) *provider.Request {
	return &provider.Request{
		Model:    "echo",
		Messages: []provider.Message{userMsg(text)},
		Call:     call,
	}
}

func userMsg(text string) provider.Message {
	return provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: text}}}
}

// stream runs one call and collects its deltas.
func stream(ctx context.Context, p *Provider, req *provider.Request) (provider.Result, []string) {
	var deltas []string
	res := p.Stream(ctx, req, func(d provider.Delta) { deltas = append(deltas, d.Text) })
	return res, deltas
}

// checkDeltas checks that the deltas concatenate to the result's text.
func checkDeltas(t *testing.T, res provider.Result, deltas []string) {
	t.Helper()
	if got, want := strings.Join(deltas, ""), res.Message.Text(); got != want {
		t.Errorf("deltas concatenate to %q, result text is %q", got, want)
	}
	if res.Message.Text() == "" && len(res.Message.Content) != 0 {
		t.Errorf("content = %+v, want none", res.Message.Content)
	}
}

func TestEcho(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Options{FirstTokenDelay: firstDelay, TokenDelay: tokenDelay})
		req := &provider.Request{
			Model:  "echo-1",
			System: "be brief",
			Messages: []provider.Message{
				userMsg("[[faults: 529]] earlier prompt"),
				{Role: provider.RoleAssistant, Content: []provider.Block{{Type: provider.BlockText, Text: "earlier answer"}}},
				userMsg("  hello   brave\nworld [[faults: ok]] "),
			},
		}
		start := time.Now()
		res, deltas := stream(t.Context(), p, req)

		want := []string{"echo: ", "hello   ", "brave\n", "world"}
		if strings.Join(deltas, "|") != strings.Join(want, "|") {
			t.Errorf("deltas = %q, want %q", deltas, want)
		}
		checkDeltas(t, res, deltas)
		if got := time.Since(start); got != firstDelay+3*tokenDelay {
			t.Errorf("took %v, want %v", got, firstDelay+3*tokenDelay)
		}
		m := res.Message
		if m.Role != provider.RoleAssistant || m.Model != "echo-1" || m.StopReason != provider.StopEnd ||
			m.ErrorMessage != "" || m.StopDetails != "" || res.Failure != nil || res.ResetState {
			t.Errorf("result = %+v", res)
		}
		// Input: "be brief" (2) + "[[faults: 529]] earlier prompt" (4) + "earlier answer" (2)
		// + "hello brave world [[faults: ok]]" (5).
		// A first request: everything before the last message is written
		// to the prompt cache, the last message is input.
		if res.Usage != (provider.Usage{InputTokens: 5, CacheWriteTokens: 8, OutputTokens: 4}) {
			t.Errorf("usage = %+v, want 5 in, 8 cache write, 4 out", res.Usage)
		}
	})
}

func TestEchoEmptyPrompt(t *testing.T) {
	res, deltas := stream(t.Context(), New(Options{}), request("[[faults: ok]]", 0))
	if got := res.Message.Text(); got != "echo: (empty prompt)" {
		t.Errorf("text = %q", got)
	}
	checkDeltas(t, res, deltas)
	res, _ = stream(t.Context(), New(Options{}), &provider.Request{Model: "m"})
	if got := res.Message.Text(); got != "echo: (empty prompt)" || res.Message.StopReason != provider.StopEnd {
		t.Errorf("no messages: result = %+v", res)
	}
}

func TestTokens(t *testing.T) {
	for _, n := range []int{1, 7, 100, MaxTokens} {
		res, deltas := stream(t.Context(), New(Options{}), request("load test [[tokens: "+strconv.Itoa(n)+"]]", 0))
		if len(deltas) != n {
			t.Errorf("tokens %d: %d deltas", n, len(deltas))
		}
		if got := len(strings.Fields(res.Message.Text())); got != n {
			t.Errorf("tokens %d: answer has %d words", n, got)
		}
		if res.Usage.OutputTokens != int64(n) || res.Message.StopReason != provider.StopEnd {
			t.Errorf("tokens %d: result stop %q usage %+v", n, res.Message.StopReason, res.Usage)
		}
		if strings.HasPrefix(res.Message.Text(), "echo") || strings.HasSuffix(res.Message.Text(), " ") {
			t.Errorf("tokens %d: answer %.40q…", n, res.Message.Text())
		}
		checkDeltas(t, res, deltas)
	}
}

func TestTokensPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Options{FirstTokenDelay: firstDelay, TokenDelay: tokenDelay})
		start := time.Now()
		_, deltas := stream(t.Context(), p, request("[[tokens: 50]]", 0))
		if len(deltas) != 50 {
			t.Fatalf("%d deltas", len(deltas))
		}
		if got := time.Since(start); got != firstDelay+49*tokenDelay {
			t.Errorf("took %v, want %v", got, firstDelay+49*tokenDelay)
		}
	})
}

func TestCallProgression(t *testing.T) {
	p := New(Options{})
	const text = "[[faults: 529,429:retry-after=2,ok]] go"
	type want struct {
		stop, msg  string
		status     int
		retryAfter string
	}
	wants := []want{
		{provider.StopError, "529 overloaded_error: Overloaded", 529, ""},
		{provider.StopError, "429 rate_limit_error: " + msgRateLimit, 429, "2"},
		{provider.StopEnd, "", 0, ""},
		{provider.StopEnd, "", 0, ""},
	}
	for call, w := range wants {
		res, deltas := stream(t.Context(), p, request(text, call))
		m := res.Message
		if m.StopReason != w.stop || m.ErrorMessage != w.msg {
			t.Errorf("call %d: stop %q message %q, want %q %q", call, m.StopReason, m.ErrorMessage, w.stop, w.msg)
		}
		if w.status == 0 {
			if res.Failure != nil || m.Text() != "echo: go" {
				t.Errorf("call %d: result %+v, want the answer", call, res)
			}
			checkDeltas(t, res, deltas)
			continue
		}
		if len(deltas) != 0 || len(m.Content) != 0 {
			t.Errorf("call %d: streamed %q, content %+v", call, deltas, m.Content)
		}
		if res.Failure == nil || res.Failure.Status != w.status {
			t.Fatalf("call %d: failure %+v, want status %d", call, res.Failure, w.status)
		}
		if got := res.Failure.Headers.Get("retry-after"); got != w.retryAfter {
			t.Errorf("call %d: retry-after %q, want %q", call, got, w.retryAfter)
		}
		if res.Failure.Headers.Get("request-id") == "" {
			t.Errorf("call %d: no request-id header", call)
		}
	}
}

// TestToolLoop checks that the script comes from the latest user message,
// not from tool results that follow it.
func TestToolLoop(t *testing.T) {
	req := &provider.Request{
		Model: "echo",
		Messages: []provider.Message{
			userMsg("[[faults: ok,500]] weather?"),
			{Role: provider.RoleAssistant, Content: []provider.Block{{Type: provider.BlockToolCall, ToolCallID: "c1", ToolName: "get_weather"}}},
			{Role: provider.RoleTool, Content: []provider.Block{{Type: provider.BlockToolResult, ToolCallID: "c1", Text: "[[faults: abort]] sunny"}}},
		},
		Call: 1,
	}
	res, _ := stream(t.Context(), New(Options{}), req)
	if res.Message.ErrorMessage != "500 api_error: Internal server error" {
		t.Errorf("error message = %q", res.Message.ErrorMessage)
	}
}

func TestSteps(t *testing.T) {
	type want struct {
		stop, msg, details string
		text               string // content
		failure            *provider.Failure
		reset              bool
	}
	anth := func(status int, typ string) *provider.Failure {
		return &provider.Failure{Status: status, Type: typ}
	}
	tests := []struct {
		step string
		want want
	}{
		{"ok", want{stop: provider.StopEnd, text: "echo: one two three four five"}},
		{"400", want{stop: provider.StopError, failure: anth(400, "invalid_request_error"),
			msg: `400 invalid_request_error: messages: roles must alternate between "user" and "assistant"`}},
		{"401", want{stop: provider.StopError, failure: anth(401, "authentication_error"),
			msg: "401 authentication_error: invalid x-api-key"}},
		{"403", want{stop: provider.StopError,
			failure: &provider.Failure{Status: 403, Type: "permission_error", Code: "oauth_not_allowed_for_organization"},
			msg:     "403 permission_error: OAuth authentication is currently not allowed for this organization."}},
		{"404", want{stop: provider.StopError, failure: anth(404, "not_found_error"),
			msg: "404 not_found_error: model: sim-model"}},
		{"408", want{stop: provider.StopError, failure: anth(408, ""), msg: "408 Request Timeout"}},
		{"409", want{stop: provider.StopError, failure: anth(409, "conflict_error"), msg: "409 conflict_error"}},
		{"413", want{stop: provider.StopError, failure: anth(413, "request_too_large"),
			msg: "413 request_too_large: Request exceeds the maximum size"}},
		{"429", want{stop: provider.StopError, failure: anth(429, "rate_limit_error"),
			msg: "429 rate_limit_error: Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."}},
		{"500", want{stop: provider.StopError, failure: anth(500, "api_error"), msg: "500 api_error: Internal server error"}},
		{"502", want{stop: provider.StopError, failure: anth(502, ""), msg: "502 Bad Gateway"}},
		{"503", want{stop: provider.StopError, failure: anth(503, ""),
			msg: "503 upstream connect error or disconnect/reset before headers. reset reason: connection failure"}},
		{"504", want{stop: provider.StopError, failure: anth(504, "timeout_error"),
			msg: "504 timeout_error: The request timed out while processing."}},
		{"529", want{stop: provider.StopError, failure: anth(529, "overloaded_error"), msg: "529 overloaded_error: Overloaded"}},
		{"overloaded-stream", want{stop: provider.StopError, failure: anth(200, "overloaded_error"),
			msg: "200 overloaded_error: Overloaded"}},
		{"midstream", want{stop: provider.StopError, failure: anth(200, ""), text: "echo: one two ", // half of six words
			details: provider.DetailInterruptedAfterContent,
			msg:     "stream error: stream ID 1; INTERNAL_ERROR; received from peer"}},
		{"midstream:after=4", want{stop: provider.StopError, failure: anth(200, ""), text: "echo: one two three ",
			details: provider.DetailInterruptedAfterContent,
			msg:     "stream error: stream ID 1; INTERNAL_ERROR; received from peer"}},
		{"cut", want{stop: provider.StopError, failure: anth(200, ""), text: "echo: one two three four five",
			details: provider.DetailInterruptedAfterContent,
			msg:     "stream ended before message_stop: unexpected EOF"}},
		{"cut:after=2", want{stop: provider.StopError, failure: anth(200, ""), text: "echo: one ",
			details: provider.DetailInterruptedAfterContent,
			msg:     "stream ended before message_stop: unexpected EOF"}},
		{"reset", want{stop: provider.StopError, failure: &provider.Failure{},
			msg: "read tcp 127.0.0.1:52814->127.0.0.1:443: read: connection reset by peer"}},
		{"timeout", want{stop: provider.StopError, failure: &provider.Failure{}, msg: "Request timed out."}},
		{"overflow", want{stop: provider.StopError, failure: anth(400, "invalid_request_error"),
			msg: "400 invalid_request_error: prompt is too long: 205351 tokens > 200000 maximum"}},
		{"usage", want{stop: provider.StopError,
			failure: &provider.Failure{Status: 429, Type: "insufficient_quota", Code: "insufficient_quota"},
			msg:     "429 insufficient_quota: You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."}},
		{"stale", want{stop: provider.StopError, reset: true,
			failure: &provider.Failure{Status: 400, Type: "invalid_request_error", Code: "previous_response_not_found"},
			msg:     "400 invalid_request_error: Previous response with id '" + staleID(&provider.Request{Model: "sim-model"}) + "' not found."}},
		{"stale-reasoning", want{stop: provider.StopError, failure: anth(400, "invalid_request_error"),
			msg: "400 invalid_request_error: messages.1.content.0: Invalid `signature` in `thinking` block"}},
		{"refusal", want{stop: provider.StopError, details: provider.DetailRefusal,
			msg: "Refusal (cyber): Classifier declined this turn."}},
		{"abort", want{stop: provider.StopAborted, msg: "Request was aborted"}},
	}
	p := New(Options{})
	for _, tt := range tests {
		t.Run(tt.step, func(t *testing.T) {
			req := request("[[faults: "+tt.step+"]] one two three four five", 0)
			req.Model = "sim-model"
			res, deltas := stream(t.Context(), p, req)
			m := res.Message
			if m.StopReason != tt.want.stop || m.ErrorMessage != tt.want.msg || m.StopDetails != tt.want.details {
				t.Errorf("stop %q, message %q, details %q\nwant %q, %q, %q",
					m.StopReason, m.ErrorMessage, m.StopDetails, tt.want.stop, tt.want.msg, tt.want.details)
			}
			if m.Text() != tt.want.text {
				t.Errorf("text %q, want %q", m.Text(), tt.want.text)
			}
			checkDeltas(t, res, deltas)
			if m.Model != "sim-model" || m.Role != provider.RoleAssistant {
				t.Errorf("model %q role %q", m.Model, m.Role)
			}
			if res.ResetState != tt.want.reset {
				t.Errorf("ResetState = %v", res.ResetState)
			}
			if int(res.Usage.OutputTokens) != len(deltas) {
				t.Errorf("output tokens %d, %d deltas", res.Usage.OutputTokens, len(deltas))
			}
			f, wf := res.Failure, tt.want.failure
			if (f == nil) != (wf == nil) {
				t.Fatalf("failure %+v, want %+v", f, wf)
			}
			if f == nil {
				return
			}
			if f.Status != wf.Status || f.Type != wf.Type || f.Code != wf.Code {
				t.Errorf("failure %d %q %q, want %d %q %q", f.Status, f.Type, f.Code, wf.Status, wf.Type, wf.Code)
			}
			switch {
			case f.Status == 0:
				if f.Headers != nil {
					t.Errorf("transport failure has headers %v", f.Headers)
				}
			case tt.step == "usage" || tt.step == "stale":
				if !strings.HasPrefix(f.Headers.Get("x-request-id"), "req_") {
					t.Errorf("headers %v, want x-request-id", f.Headers)
				}
			default:
				if !strings.HasPrefix(f.Headers.Get("request-id"), "req_") {
					t.Errorf("headers %v, want request-id", f.Headers)
				}
			}
		})
	}
}

func TestHeaderOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Options{})
		now := time.Now().UTC()
		tests := []struct {
			step   string
			header map[string]string
		}{
			{"429:retry-after=2", map[string]string{"retry-after": "2"}},
			{"529:retry-after=1.5:retry-after-ms=1500", map[string]string{"retry-after": "1.5", "retry-after-ms": "1500"}},
			{"429:reset=2026-08-21T12:40:59Z", map[string]string{
				"anthropic-ratelimit-requests-reset": "2026-08-21T12:40:59Z"}},
			{"429:reset=90s", map[string]string{
				"anthropic-ratelimit-requests-reset": now.Add(90 * time.Second).Format(time.RFC3339)}},
			{"overflow:retry-after=3", map[string]string{"retry-after": "3"}},
			{"usage:retry-after=60:reset=6m0s", map[string]string{
				"retry-after": "60", "x-ratelimit-reset-requests": "6m0s"}},
			{"usage:reset=" + now.Add(2*time.Hour).Format(time.RFC3339), map[string]string{
				"x-ratelimit-reset-requests": "2h0m0s"}},
			{"stale:retry-after-ms=0", map[string]string{"retry-after-ms": "0"}},
		}
		for _, tt := range tests {
			res, _ := stream(t.Context(), p, request("[[faults: "+tt.step+"]]", 0))
			if res.Failure == nil {
				t.Errorf("%s: no failure", tt.step)
				continue
			}
			for k, v := range tt.header {
				if got := res.Failure.Headers.Get(k); got != v {
					t.Errorf("%s: header %s = %q, want %q", tt.step, k, got, v)
				}
			}
			if tt.step == "429:retry-after=2" && res.Failure.Headers.Get("anthropic-ratelimit-requests-reset") != "" {
				t.Errorf("%s: reset header without reset option", tt.step)
			}
		}
	})
}

func TestRequestIDsUnique(t *testing.T) {
	p := New(Options{})
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			res, _ := stream(t.Context(), p, request("[[faults: 500]]", 0))
			mu.Lock()
			defer mu.Unlock()
			seen[res.Failure.Headers.Get("request-id")] = true
		})
	}
	wg.Wait()
	if len(seen) != 20 {
		t.Errorf("%d distinct request ids from 20 calls", len(seen))
	}
}

func TestDelayOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Options{FirstTokenDelay: firstDelay, TokenDelay: tokenDelay})
		for _, tt := range []struct {
			step string
			took time.Duration
		}{
			{"ok:delay=500", 500*time.Millisecond + firstDelay + 2*tokenDelay}, // "echo: " "a " "b"
			{"529:delay=250", 250*time.Millisecond + firstDelay},
			{"reset:delay=0", firstDelay},
			{"midstream:delay=100", 100*time.Millisecond + firstDelay + tokenDelay}, // one word, then the failure
			{"abort:delay=1000", time.Second + firstDelay},
		} {
			start := time.Now()
			stream(t.Context(), p, request("[[faults: "+tt.step+"]] a b", 0))
			if got := time.Since(start); got != tt.took {
				t.Errorf("%s took %v, want %v", tt.step, got, tt.took)
			}
		}
	})
}

func TestCancelMidStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Options{FirstTokenDelay: firstDelay, TokenDelay: tokenDelay})
		// The deadline falls between the third and the fourth word.
		timeout := firstDelay + 2*tokenDelay + tokenDelay/2
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		start := time.Now()
		res, deltas := stream(ctx, p, request("[[tokens: 100]]", 0))
		if got := time.Since(start); got != timeout {
			t.Errorf("returned after %v, want %v (at the deadline)", got, timeout)
		}
		m := res.Message
		if m.StopReason != provider.StopAborted || m.ErrorMessage != provider.AbortedMessage || res.Failure != nil {
			t.Errorf("result = %+v", res)
		}
		if len(deltas) != 3 || m.Text() != "lorem ipsum dolor " || res.Usage.OutputTokens != 3 {
			t.Errorf("deltas %q, text %q, usage %+v; want the first three words", deltas, m.Text(), res.Usage)
		}
		checkDeltas(t, res, deltas)
	})
}

func TestCancelFromDelta(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var deltas []string
	res := New(Options{}).Stream(ctx, request("one two three four", 0), func(d provider.Delta) {
		deltas = append(deltas, d.Text)
		if len(deltas) == 2 {
			cancel()
		}
	})
	if res.Message.StopReason != provider.StopAborted || res.Message.Text() != "echo: one " {
		t.Errorf("result = %+v", res)
	}
	checkDeltas(t, res, deltas)
}

func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, step := range []string{"ok", "529", "hang", "refusal", "midstream"} {
		res, deltas := stream(ctx, New(Options{}), request("[[faults: "+step+"]] hi", 0))
		if res.Message.StopReason != provider.StopAborted || len(deltas) != 0 || len(res.Message.Content) != 0 {
			t.Errorf("%s: result %+v, deltas %q", step, res, deltas)
		}
	}
}

func TestCancelDuringDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		res, _ := stream(ctx, New(Options{}), request("[[faults: 529:delay=60000]]", 0))
		if time.Since(start) != time.Second || res.Message.StopReason != provider.StopAborted || res.Failure != nil {
			t.Errorf("after %v: result %+v", time.Since(start), res)
		}
	})
}

func TestHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Options{FirstTokenDelay: firstDelay, TokenDelay: tokenDelay})
		ctx, cancel := context.WithCancel(t.Context())
		var res provider.Result
		var deltas []string
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, deltas = stream(ctx, p, request("[[faults: hang]] hi", 0))
		}()

		synctest.Wait() // the call is durably blocked: nothing but ctx can wake it
		select {
		case <-done:
			t.Fatal("hang returned before its context was cancelled")
		default:
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("hang did not return when its context was cancelled")
		}
		m := res.Message
		if m.StopReason != provider.StopAborted || m.ErrorMessage != provider.AbortedMessage ||
			len(m.Content) != 0 || len(deltas) != 0 || res.Failure != nil {
			t.Errorf("result = %+v, deltas %q", res, deltas)
		}
	})
}

func TestHangAfterWords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Options{FirstTokenDelay: firstDelay, TokenDelay: tokenDelay})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		res, deltas := stream(ctx, p, request("[[faults: hang:after=2]] one two three", 0))
		if time.Since(start) != time.Minute {
			t.Errorf("returned after %v, want 1m", time.Since(start))
		}
		if res.Message.StopReason != provider.StopAborted || res.Message.Text() != "echo: one " {
			t.Errorf("result = %+v", res)
		}
		checkDeltas(t, res, deltas)
	})
}

// TestAbortStepWithLiveContext checks the reasonless abort: aborted, the
// sentinel message and no content, although nobody cancelled anything.
func TestAbortStepWithLiveContext(t *testing.T) {
	ctx := t.Context()
	res, deltas := stream(ctx, New(Options{}), request("[[faults: abort,ok]] hi", 0))
	if ctx.Err() != nil {
		t.Fatal("context cancelled")
	}
	if m := res.Message; m.StopReason != provider.StopAborted || m.ErrorMessage != "Request was aborted" ||
		len(m.Content) != 0 || len(deltas) != 0 {
		t.Errorf("result = %+v", res)
	}
	res, _ = stream(ctx, New(Options{}), request("[[faults: abort,ok]] hi", 1))
	if res.Message.StopReason != provider.StopEnd {
		t.Errorf("call after the abort: %+v", res)
	}
}

func TestBadScriptInStream(t *testing.T) {
	res, deltas := stream(t.Context(), New(Options{}), request("[[faults: ok,foo]] hi", 0))
	want := `400 invalid_request_error: faults step 2: unknown step "foo"`
	if m := res.Message; m.StopReason != provider.StopError || m.ErrorMessage != want || len(deltas) != 0 {
		t.Errorf("result = %+v, want error %q", res, want)
	}
	if f := res.Failure; f == nil || f.Status != 400 || f.Type != "invalid_request_error" {
		t.Errorf("failure = %+v", res.Failure)
	}
}

func TestNilOnDelta(t *testing.T) {
	res := New(Options{}).Stream(t.Context(), request("hi", 0), nil)
	if res.Message.Text() != "echo: hi" {
		t.Errorf("result = %+v", res)
	}
}

// A call that asks for thinking streams it before the answer and ends with
// a signed thinking block; a failed call's thinking is not signed.
func TestThinking(t *testing.T) {
	p := New(Options{})
	for _, tc := range []struct {
		effort string
		want   string
	}{
		{provider.EffortLow, `The prompt says "hi there".`},
		{"", `The prompt says "hi there". An echo of it answers.`},
		{provider.EffortHigh, `The prompt says "hi there". An echo of it answers. Nothing else is asked for, so the echo is the whole answer.`},
	} {
		req := request("hi there", 0)
		req.Params.Thinking = &provider.Thinking{Effort: tc.effort}
		var thinking, text strings.Builder
		var order []string
		res := p.Stream(t.Context(), req, func(d provider.Delta) {
			thinking.WriteString(d.Thinking)
			text.WriteString(d.Text)
			if d.Thinking != "" && (len(order) == 0 || order[len(order)-1] != "thinking") {
				order = append(order, "thinking")
			}
			if d.Text != "" && (len(order) == 0 || order[len(order)-1] != "text") {
				order = append(order, "text")
			}
		})
		m := res.Message
		if thinking.String() != tc.want || text.String() != "echo: hi there" || strings.Join(order, ",") != "thinking,text" {
			t.Errorf("effort %q: thinking %q text %q order %v", tc.effort, thinking.String(), text.String(), order)
		}
		if len(m.Content) != 2 || m.Content[0].Type != provider.BlockThinking || m.Content[0].Text != tc.want ||
			m.Content[0].Signature != Signature("echo", tc.want) || !strings.HasPrefix(m.Content[0].Signature, "sim-sig-") ||
			m.Text() != "echo: hi there" {
			t.Errorf("effort %q: content %+v", tc.effort, m.Content)
		}
		if int(res.Usage.OutputTokens) != len(wordRe.FindAllString(tc.want, -1))+3 {
			t.Errorf("effort %q: usage %+v", tc.effort, res.Usage)
		}
	}

	req := request("[[faults: midstream]] hi there", 0)
	req.Params.Thinking = &provider.Thinking{}
	res := p.Stream(t.Context(), req, nil)
	if m := res.Message; m.StopReason != provider.StopError || len(m.Content) != 2 || m.Content[0].Type != provider.BlockThinking ||
		m.Content[0].Text == "" || m.Content[0].Signature != "" || m.HasReasoningState() {
		t.Errorf("midstream with thinking: %+v", m)
	}

	// Tool turns think first too.
	req = request("[[tools: get]] hi", 0)
	req.Params.Thinking = &provider.Thinking{}
	res = p.Stream(t.Context(), req, nil)
	if m := res.Message; m.StopReason != provider.StopToolUse || len(m.Content) != 2 || m.Content[0].Signature == "" || m.Content[1].Type != provider.BlockToolCall {
		t.Errorf("tool turn with thinking: %+v", m)
	}
}
