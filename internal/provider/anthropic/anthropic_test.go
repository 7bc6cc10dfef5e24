package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// secret is a recognisable fake key: no text a test sees may contain it,
// or any 8-character piece of it.
const secret = "sk-ant-api03-FAKEKEYzq7Wx9Vb2Nm4Lk6Jh8Gf0Dd-1a2b3c4d5e6f"

func newServer(t *testing.T, opts providertest.Options) *providertest.Server {
	s := providertest.NewServer(opts)
	t.Cleanup(s.Close)
	return s
}

func newClient(t *testing.T, opts Options) *Client {
	c := New(opts)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func request() *provider.Request {
	return &provider.Request{
		SessionID: "s1",
		Model:     "claude-sonnet-4-5",
		System:    "be brief",
		Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hi"}}},
		},
		Credential: provider.Credential{ID: "team-a", Secret: secret},
	}
}

func streamT(t *testing.T, c *Client, req *provider.Request) (provider.Result, *providertest.Deltas) {
	t.Helper()
	rec := &providertest.Deltas{}
	res := c.Stream(testkit.Context(t), req, rec.On)
	providertest.CheckNoSecret(t, res, secret)
	return res, rec
}

func TestCompleteStreamIsIncremental(t *testing.T) {
	hold := make(chan struct{})
	s := newServer(t, providertest.Options{})
	// The server stops after the first text delta until the client has
	// seen it: the call can only finish if deltas arrive as they stream.
	s.Enqueue(providertest.Step{
		Answer:    &providertest.Answer{Text: []string{"Hello", " world", "!"}, InputTokens: 25, OutputTokens: 3},
		Hold:      hold,
		HoldAfter: 3, // content_block_start, ping, first text delta
		Headers:   providertest.AnthropicRateLimitHeaders(),
	})
	c := newClient(t, Options{BaseURL: s.URL})
	rec := &providertest.Deltas{}
	rec.Hook = func(d provider.Delta) {
		if d.Text == "Hello" {
			close(hold)
		}
	}
	res := c.Stream(testkit.Context(t), request(), rec.On)
	providertest.CheckNoSecret(t, res, secret)

	m := res.Message
	if m.StopReason != provider.StopEnd || m.ErrorMessage != "" || res.Failure != nil {
		t.Fatalf("result = %+v", res)
	}
	if got := rec.Text(); got != "Hello world!" || len(rec.All) != 3 {
		t.Errorf("deltas = %+v", rec.All)
	}
	if m.Text() != "Hello world!" || len(m.Content) != 1 || m.Role != provider.RoleAssistant || m.Model != "claude-sonnet-4-5" {
		t.Errorf("message = %+v", m)
	}
	if res.Usage != (provider.Usage{InputTokens: 25, OutputTokens: 3}) {
		t.Errorf("usage = %+v", res.Usage)
	}

	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	r := reqs[0]
	if r.Path != "/v1/messages" || r.Header.Get("x-api-key") != secret || r.Header.Get("anthropic-version") != DefaultVersion ||
		r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("request %s headers %v", r.Path, r.Header)
	}
	var body map[string]any
	if err := r.JSON(&body); err != nil {
		t.Fatal(err)
	}
	system, _ := body["system"].([]any)
	if body["model"] != "claude-sonnet-4-5" || body["max_tokens"] != float64(DefaultMaxTokens) || body["stream"] != true ||
		len(system) != 1 || system[0].(map[string]any)["text"] != "be brief" {
		t.Errorf("body = %v", body)
	}
	checkRequestHasNoSecret(t, r)
}

// checkRequestHasNoSecret checks the key is in the auth header only.
func checkRequestHasNoSecret(t *testing.T, r providertest.Request) {
	t.Helper()
	if strings.Contains(string(r.Body), secret[:12]) {
		t.Errorf("request body carries the key")
	}
	for k, vs := range r.Header {
		if strings.EqualFold(k, "x-api-key") || strings.EqualFold(k, "Authorization") {
			continue
		}
		for _, v := range vs {
			if strings.Contains(v, secret[:12]) {
				t.Errorf("header %s carries the key", k)
			}
		}
	}
}

func TestThinkingAndToolCalls(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{
		Thinking: []string{"Let me ", "check."},
		Text:     []string{"Checking ", "both."},
		Tools: []providertest.ToolCall{
			{ID: "toolu_1", Name: "get_weather", Args: []string{`{"city": `, `"Paris"}`}},
			{ID: "toolu_2", Name: "get_time", Args: nil},
		},
	}})
	c := newClient(t, Options{BaseURL: s.URL + "/v1/"}) // a trailing /v1 is tolerated
	res, rec := streamT(t, c, request())
	m := res.Message
	if m.StopReason != provider.StopToolUse {
		t.Fatalf("result = %+v", res)
	}
	if rec.Thinking() != "Let me check." || rec.Text() != "Checking both." {
		t.Errorf("deltas = %+v", rec.All)
	}
	// Tool deltas: id and name first, then argument pieces.
	var tools []string
	for _, d := range rec.All {
		if d.ToolCallID != "" {
			tools = append(tools, fmt.Sprintf("%s/%s/%s", d.ToolCallID, d.ToolName, d.ToolArgsPart))
		}
	}
	want := []string{"toolu_1/get_weather/", `toolu_1/get_weather/{"city": `, `toolu_1/get_weather/"Paris"}`, "toolu_2/get_time/"}
	if strings.Join(tools, "|") != strings.Join(want, "|") {
		t.Errorf("tool deltas = %q, want %q", tools, want)
	}
	wantContent := []provider.Block{
		{Type: provider.BlockThinking, Text: "Let me check.",
			Signature: providertest.AnthropicSignature(providertest.DefaultAccount, "claude-sonnet-4-5", "Let me check.")},
		{Type: provider.BlockText, Text: "Checking both."},
		{Type: provider.BlockToolCall, ToolCallID: "toolu_1", ToolName: "get_weather", ToolInput: json.RawMessage(`{"city":"Paris"}`)},
		{Type: provider.BlockToolCall, ToolCallID: "toolu_2", ToolName: "get_time", ToolInput: json.RawMessage(`{}`)},
	}
	if got, want := fmt.Sprintf("%+v", m.Content), fmt.Sprintf("%+v", wantContent); got != want {
		t.Errorf("content =\n%s\nwant\n%s", got, want)
	}
}

func TestStopReasons(t *testing.T) {
	for _, tc := range []struct {
		answer                providertest.Answer
		stop, details, errMsg string
	}{
		{providertest.Answer{Text: []string{"cut"}, Stop: providertest.StopLength}, provider.StopLength, "", ""},
		{providertest.Answer{Stop: providertest.StopRefusal, RefusalCategory: "cyber", Refusal: "Classifier declined this turn."},
			provider.StopError, provider.DetailRefusal, "Refusal (cyber): Classifier declined this turn."},
		{providertest.Answer{Text: []string{"I "}, Stop: providertest.StopRefusal},
			provider.StopError, provider.DetailRefusal, `Refusal: the model declined to respond (stop_reason "refusal").`},
	} {
		s := newServer(t, providertest.Options{Answer: &tc.answer})
		res, _ := streamT(t, newClient(t, Options{BaseURL: s.URL}), request())
		m := res.Message
		if m.StopReason != tc.stop || m.StopDetails != tc.details || m.ErrorMessage != tc.errMsg || res.Failure != nil {
			t.Errorf("answer %+v: result %+v", tc.answer, res)
		}
	}
}

func TestHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		name                string
		step                providertest.Step
		msg, typ, code      string
		status              int
		header, headerValue string
	}{
		{"529", providertest.HTTPError(529), "529 overloaded_error: Overloaded", "overloaded_error", "", 529, "request-id", "req_test0000"},
		{"429 retry-after and rate-limit headers", func() providertest.Step {
			st := providertest.HTTPError(429, "retry-after", "7")
			for k, v := range providertest.AnthropicRateLimitHeaders() {
				st.Headers[k] = v
			}
			return st
		}(), "429 rate_limit_error: Number of request tokens has exceeded your per-minute rate limit", "rate_limit_error", "", 429,
			"anthropic-ratelimit-tokens-reset", "2025-08-21T12:40:59Z"},
		{"429 spend limit", providertest.RawError(429, providertest.AnthropicSpendLimit),
			"429 rate_limit_error: You have reached your specified API usage limits.", "rate_limit_error", "enforced_spend_limit_reached", 429, "", ""},
		{"413 cloudflare body", providertest.HTTPError(413), "413 request_too_large: Request exceeds the maximum size", "request_too_large", "", 413, "", ""},
		{"403 details.error_code", providertest.HTTPError(403),
			"403 permission_error: OAuth authentication is currently not allowed for this organization.", "permission_error", "oauth_not_allowed_for_organization", 403, "", ""},
		{"400 prompt too long", providertest.RawError(400, providertest.AnthropicPromptTooLong),
			"400 invalid_request_error: prompt is too long: 205351 tokens > 200000 maximum", "invalid_request_error", "", 400, "", ""},
		{"401", providertest.HTTPError(401), "401 authentication_error: invalid x-api-key", "authentication_error", "", 401, "", ""},
		{"502 html", providertest.Step{Kind: providertest.StepHTTPError, Status: 502, ContentType: "text/html",
			Body: "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>"},
			"502 Bad Gateway", "", "", 502, "", ""},
		{"503 text", providertest.Step{Kind: providertest.StepHTTPError, Status: 503, ContentType: "text/plain",
			Body: "upstream connect error or disconnect/reset before headers. reset reason: connection failure"},
			"503 upstream connect error or disconnect/reset before headers. reset reason: connection failure", "", "", 503, "", ""},
		{"504 empty", providertest.Step{Kind: providertest.StepHTTPError, Status: 504, Body: " "}, "504 Gateway Timeout", "", "", 504, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, providertest.Options{})
			s.Enqueue(tc.step)
			res, rec := streamT(t, newClient(t, Options{BaseURL: s.URL}), request())
			m, f := res.Message, res.Failure
			if m.StopReason != provider.StopError || !strings.HasPrefix(m.ErrorMessage, tc.msg) || m.StopDetails != "" || len(m.Content) != 0 || len(rec.All) != 0 {
				t.Errorf("message = %+v, want error %q", m, tc.msg)
			}
			if f == nil || f.Status != tc.status || f.Type != tc.typ || f.Code != tc.code {
				t.Fatalf("failure = %+v, want status %d type %q code %q", f, tc.status, tc.typ, tc.code)
			}
			if tc.header != "" && f.Headers.Get(tc.header) != tc.headerValue {
				t.Errorf("header %s = %q, want %q", tc.header, f.Headers.Get(tc.header), tc.headerValue)
			}
			if tc.status == 429 && tc.code == "" && f.Headers.Get("retry-after") != "7" {
				t.Errorf("retry-after = %q", f.Headers.Get("retry-after"))
			}
		})
	}
}

func TestMidStreamErrorEvent(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{Text: []string{"Hel", "lo"}}})
	// Right after message_start: nothing observable yet.
	s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, Headers: http.Header{"Anthropic-Ratelimit-Requests-Remaining": {"0"}}})
	// After a text delta: observable output.
	s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, After: 3, ErrorType: "api_error", ErrorMessage: "Internal server error"})
	c := newClient(t, Options{BaseURL: s.URL})

	res, _ := streamT(t, c, request())
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || m.ErrorMessage != "200 overloaded_error: Overloaded" ||
		m.StopDetails != "" || f == nil || f.Status != 200 || f.Type != "overloaded_error" || f.Headers.Get("anthropic-ratelimit-requests-remaining") != "0" {
		t.Errorf("before content: %+v", res)
	}
	res, rec := streamT(t, c, request())
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || m.ErrorMessage != "200 api_error: Internal server error" ||
		m.StopDetails != provider.DetailInterruptedAfterContent || m.Text() != "Hel" || rec.Text() != "Hel" || f == nil || f.Status != 200 || f.Type != "api_error" {
		t.Errorf("after content: %+v", res)
	}
}

func TestTransportFailures(t *testing.T) {
	answer := &providertest.Answer{Text: []string{"Hel", "lo"}, Tools: []providertest.ToolCall{
		{ID: "toolu_1", Name: "a", Args: []string{`{"x":`, `1}`}},
		{ID: "toolu_2", Name: "b", Args: []string{`{"y":`, `2}`}},
	}}
	// Body frames: 0 text start, 1 ping, 2 "Hel", 3 "lo", 4 text stop,
	// 5 tool 1 start, 6-8 its args, 9 its stop, 10 tool 2 start, 11-13 its
	// args, 14 its stop, 15 message_delta.
	for _, tc := range []struct {
		name    string
		step    providertest.Step
		msg     string // the message contains it
		status  int
		details string
		text    string
		tools   int // completed tool calls kept
	}{
		{"reset before headers", providertest.Step{Kind: providertest.StepReset, BeforeHeaders: true}, "/v1/messages", 0, "", "", 0},
		{"EOF before message_start", providertest.Step{Kind: providertest.StepCut, SkipPreamble: true},
			"anthropic stream envelope error: stream ended before message_start: unexpected EOF", 200, "", "", 0},
		{"cut after message_start", providertest.Step{Kind: providertest.StepCut},
			"stream ended before message_stop: unexpected EOF", 200, "", "", 0},
		{"cut mid-answer", providertest.Step{Kind: providertest.StepCut, After: 3},
			"stream ended before message_stop: unexpected EOF", 200, provider.DetailInterruptedAfterContent, "Hel", 0},
		{"cut mid tool call: the incomplete call is stripped", providertest.Step{Kind: providertest.StepCut, After: 12},
			"stream ended before message_stop: unexpected EOF", 200, provider.DetailInterruptedAfterContent, "Hello", 1},
		{"cut before message_stop", providertest.Step{Kind: providertest.StepCut, After: providertest.AllFrames},
			"stream ended before message_stop: unexpected EOF", 200, provider.DetailInterruptedAfterContent, "Hello", 2},
		{"reset mid-answer", providertest.Step{Kind: providertest.StepReset, After: 4},
			"stream ended before message_stop: ", 200, provider.DetailInterruptedAfterContent, "Hello", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, providertest.Options{Answer: answer})
			s.Enqueue(tc.step)
			res, _ := streamT(t, newClient(t, Options{BaseURL: s.URL}), request())
			m, f := res.Message, res.Failure
			if m.StopReason != provider.StopError || !strings.Contains(m.ErrorMessage, tc.msg) || m.StopDetails != tc.details || m.Text() != tc.text {
				t.Errorf("message = %+v, want error containing %q, details %q, text %q", m, tc.msg, tc.details, tc.text)
			}
			tools := 0
			for _, b := range m.Content {
				if b.Type == provider.BlockToolCall {
					tools++
					if !json.Valid(b.ToolInput) {
						t.Errorf("tool call %+v has invalid input", b)
					}
				}
			}
			if tools != tc.tools {
				t.Errorf("%d tool calls kept, want %d: %+v", tools, tc.tools, m.Content)
			}
			if f == nil || f.Status != tc.status {
				t.Errorf("failure = %+v, want status %d", f, tc.status)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	res, _ := streamT(t, newClient(t, Options{BaseURL: "http://" + addr}), request())
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || !strings.Contains(m.ErrorMessage, "connection refused") ||
		f == nil || f.Status != 0 || f.Headers != nil {
		t.Errorf("result = %+v", res)
	}
}

func TestTLSError(t *testing.T) {
	s := providertest.NewTLSServer(providertest.Options{})
	t.Cleanup(s.Close)
	res, _ := streamT(t, newClient(t, Options{BaseURL: s.URL}), request())
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || !strings.Contains(m.ErrorMessage, "tls: failed to verify certificate") ||
		f == nil || f.Status != 0 {
		t.Errorf("result = %+v", res)
	}
	// With the server's trust, the same server answers.
	res, _ = streamT(t, newClient(t, Options{BaseURL: s.URL, HTTPClient: s.Client()}), request())
	if res.Message.StopReason != provider.StopEnd || res.Message.Text() != "Hello!" {
		t.Errorf("trusted: %+v", res)
	}
}

func TestTimeouts(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(
		providertest.Step{Kind: providertest.StepHang, After: 3},
		providertest.Step{Kind: providertest.StepHang, BeforeHeaders: true},
		providertest.Step{Kind: providertest.StepHang, After: 3},
	)
	c := newClient(t, Options{BaseURL: s.URL, ReadTimeout: 100 * time.Millisecond})
	res, _ := streamT(t, c, request())
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || m.ErrorMessage != "stream read timed out: no data from the provider for 100ms" ||
		m.StopDetails != provider.DetailInterruptedAfterContent || m.Text() != "Hello" || f == nil || f.Status != 200 {
		t.Errorf("read timeout mid-stream: %+v", res)
	}
	res, _ = streamT(t, c, request())
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || m.ErrorMessage != "stream read timed out: no data from the provider for 100ms" ||
		f == nil || f.Status != 0 {
		t.Errorf("read timeout before headers: %+v", res)
	}
	c = newClient(t, Options{BaseURL: s.URL, Timeout: 150 * time.Millisecond})
	res, _ = streamT(t, c, request())
	if m := res.Message; m.StopReason != provider.StopError || !strings.HasPrefix(m.ErrorMessage, "request timed out after 150ms: ") {
		t.Errorf("total timeout: %+v", res)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if !r.ClientGone {
			t.Errorf("request %d: the server did not see the client go", r.Index)
		}
	}
}

func TestCancelMidStreamClosesConnection(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepHang, After: 3})
	c := newClient(t, Options{BaseURL: s.URL})
	ctx, cancel := context.WithCancel(testkit.Context(t))
	defer cancel()
	rec := &providertest.Deltas{Hook: func(provider.Delta) { cancel() }}
	res := c.Stream(ctx, request(), rec.On)
	providertest.CheckNoSecret(t, res, secret)
	m := res.Message
	if m.StopReason != provider.StopAborted || m.ErrorMessage != provider.AbortedMessage || m.Text() != "Hello" || res.Failure != nil {
		t.Errorf("result = %+v", res)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !reqs[0].ClientGone {
		t.Errorf("the server did not observe the cancelled request's connection close")
	}
}

func TestSecretNeverLeaks(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(
		// A gateway echoing the key whole, in pieces and masked.
		providertest.RawError(401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key `+secret+
			` (prefix `+secret[:14]+`, suffix `+secret[len(secret)-10:]+`, masked `+providertest.MaskKey(secret)+`)"}}`),
		providertest.Step{Kind: providertest.StepErrorEvent, After: 3, ErrorType: "authentication_error",
			ErrorMessage: "Bearer " + secret + " rejected"},
	)
	c := newClient(t, Options{BaseURL: s.URL, AuthHeader: "Authorization"})
	res, _ := streamT(t, c, request())
	if !strings.HasPrefix(res.Message.ErrorMessage, "401 authentication_error: invalid x-api-key [REDACTED]") {
		t.Errorf("message = %q", res.Message.ErrorMessage)
	}
	res, _ = streamT(t, c, request())
	if res.Message.ErrorMessage != "200 authentication_error: Bearer [REDACTED] rejected" {
		t.Errorf("message = %q", res.Message.ErrorMessage)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if r.Header.Get("Authorization") != "Bearer "+secret || r.Header.Get("x-api-key") != "" {
			t.Errorf("auth headers: %v", r.Header)
		}
		checkRequestHasNoSecret(t, r)
	}
}

func TestExtraHeadersAndNoRedirects(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 307, Body: " ",
		Headers: http.Header{"Location": {"http://example.invalid/steal"}}})
	c := newClient(t, Options{BaseURL: s.URL, Headers: map[string]string{"anthropic-beta": "tools-2024", "x-api-key": "not-this"}})
	res, _ := streamT(t, c, request())
	if f := res.Failure; f == nil || f.Status != 307 || res.Message.ErrorMessage != "307 Temporary Redirect" {
		t.Errorf("redirect: %+v", res)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if h := reqs[0].Header; h.Get("anthropic-beta") != "tools-2024" || h.Get("x-api-key") != secret {
		t.Errorf("headers = %v", h)
	}
}

func TestRequestMapping(t *testing.T) {
	text := func(s string) provider.Block { return provider.Block{Type: provider.BlockText, Text: s} }
	req := &provider.Request{
		Model:  "m",
		System: "sys",
		Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{text("one")}},
			{Role: provider.RoleAssistant, StopReason: provider.StopError, ErrorMessage: "529 overloaded_error: Overloaded"},
			{Role: provider.RoleUser, Content: []provider.Block{text("again")}},
			{Role: provider.RoleAssistant, StopReason: provider.StopToolUse, Content: []provider.Block{
				{Type: provider.BlockThinking, Text: "hmm"},
				{Type: provider.BlockRedactedThinking, Text: "opaque"},
				text(""),
				text("calling"),
				{Type: provider.BlockToolCall, ToolCallID: "toolu_1", ToolName: "get", ToolInput: json.RawMessage(`{"k":1}`)},
				{Type: provider.BlockToolCall, ToolCallID: "toolu_2", ToolName: "none"},
			}},
			{Role: provider.RoleUser, Content: []provider.Block{text("also this")}},
			{Role: provider.RoleTool, Content: []provider.Block{
				{Type: provider.BlockToolResult, ToolCallID: "toolu_1", Text: "42"},
				{Type: provider.BlockToolResult, ToolCallID: "toolu_2", Text: "boom", IsError: true},
			}},
			{Role: provider.RoleAssistant, StopReason: provider.StopAborted, ErrorMessage: provider.AbortedMessage},
		},
		Tools: []provider.Tool{
			{Name: "get", Description: "gets", InputSchema: json.RawMessage(`{"type":"object","properties":{"k":{"type":"integer"}}}`)},
			{Name: "none"},
		},
	}
	// The mapping itself; the cache marks have their tests (cache_test.go).
	got, err := json.Marshal(New(Options{NoPromptCache: true}).requestBody(req))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","max_tokens":8192,"system":"sys","messages":[` +
		`{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"again"}]},` +
		`{"role":"assistant","content":[{"type":"redacted_thinking","data":"opaque"},{"type":"text","text":"calling"},` +
		`{"type":"tool_use","id":"toolu_1","name":"get","input":{"k":1}},{"type":"tool_use","id":"toolu_2","name":"none","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"},` +
		`{"type":"tool_result","tool_use_id":"toolu_2","content":"boom","is_error":true},{"type":"text","text":"also this"}]}],` +
		`"tools":[{"name":"get","description":"gets","input_schema":{"type":"object","properties":{"k":{"type":"integer"}}}},` +
		`{"name":"none","input_schema":{"type":"object"}}],"stream":true}`
	if string(got) != want {
		t.Errorf("body =\n%s\nwant\n%s", got, want)
	}
}

func TestConnectionReuseAndJSONOn200(t *testing.T) {
	s := newServer(t, providertest.Options{})
	c := newClient(t, Options{BaseURL: s.URL})
	streamT(t, c, request())
	streamT(t, c, request())
	reqs, err := s.WaitRequests(testkit.Context(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].RemoteAddr != reqs[1].RemoteAddr {
		t.Errorf("a completed stream's connection was not reused: %s, %s", reqs[0].RemoteAddr, reqs[1].RemoteAddr)
	}

	s.Enqueue(providertest.RawError(200, providertest.AnthropicOverloaded))
	res, _ := streamT(t, c, request())
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || m.ErrorMessage != "200 overloaded_error: Overloaded" || f == nil || f.Status != 200 {
		t.Errorf("JSON error on a 200: %+v", res)
	}
}

// TestAnsweredOnceBeforeTheFirstDelta: Request.Answered runs once the
// stream's headers are in and before its first delta; an error answer
// never calls it.
func TestAnsweredOnceBeforeTheFirstDelta(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Answer: &providertest.Answer{Text: []string{"Hello", " world"}}})
	s.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 429})
	c := newClient(t, Options{BaseURL: s.URL})

	var seen []string
	req := request()
	req.Answered = func() {
		if n := len(s.Requests()); n != 1 {
			t.Errorf("answered with %d requests at the server, want 1", n)
		}
		seen = append(seen, "answered")
	}
	rec := &providertest.Deltas{}
	rec.Hook = func(d provider.Delta) { seen = append(seen, d.Text) }
	res := c.Stream(testkit.Context(t), req, rec.On)
	providertest.CheckNoSecret(t, res, secret)
	if res.Message.StopReason != provider.StopEnd {
		t.Fatalf("result = %+v", res)
	}
	if got, want := strings.Join(seen, "|"), "answered|Hello| world"; got != want {
		t.Errorf("calls = %q, want %q", got, want)
	}

	seen = nil
	res, _ = streamT(t, c, req)
	if res.Message.StopReason != provider.StopError || len(seen) != 0 {
		t.Errorf("429: result %+v, calls %q (want none)", res.Message, seen)
	}
}
