package openai

import (
	"bytes"
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
const secret = "sk-proj-FAKEKEYq9Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf"

// apis are the two kinds this package serves.
var apis = []string{APIResponses, APIChat}

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

func userMsg(text string) provider.Message {
	return provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: text}}}
}

func request(msgs ...provider.Message) *provider.Request {
	if len(msgs) == 0 {
		msgs = []provider.Message{userMsg("hi")}
	}
	return &provider.Request{
		SessionID:  "s1",
		Model:      "gpt-5",
		System:     "be brief",
		Messages:   msgs,
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

func checkRequestHasNoSecret(t *testing.T, r providertest.Request) {
	t.Helper()
	if bytes.Contains(r.Body, []byte(secret[:12])) {
		t.Errorf("request body carries the key")
	}
	for k, vs := range r.Header {
		if strings.EqualFold(k, "Authorization") || strings.EqualFold(k, "api-key") {
			continue
		}
		for _, v := range vs {
			if strings.Contains(v, secret[:12]) {
				t.Errorf("header %s carries the key", k)
			}
		}
	}
}

// firstDeltaFrame is the number of body frames before the first text delta.
var firstDeltaFrame = map[string]int{APIResponses: 2, APIChat: 0}

func TestCompleteStreamIsIncremental(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			hold := make(chan struct{})
			s := newServer(t, providertest.Options{})
			s.Enqueue(providertest.Step{
				Answer:    &providertest.Answer{Text: []string{"Hello", " world", "!"}, InputTokens: 25, OutputTokens: 3},
				Hold:      hold,
				HoldAfter: firstDeltaFrame[api] + 1,
			})
			c := newClient(t, Options{API: api, BaseURL: s.URL + "/v1"})
			rec := &providertest.Deltas{Hook: func(d provider.Delta) {
				if d.Text == "Hello" {
					close(hold)
				}
			}}
			res := c.Stream(testkit.Context(t), request(), rec.On)
			providertest.CheckNoSecret(t, res, secret)
			m := res.Message
			if m.StopReason != provider.StopEnd || res.Failure != nil || m.Text() != "Hello world!" || rec.Text() != "Hello world!" ||
				len(m.Content) != 1 || m.Model != "gpt-5" {
				t.Fatalf("result = %+v, deltas %+v", res, rec.All)
			}
			if res.Usage != (provider.Usage{InputTokens: 25, OutputTokens: 3}) {
				t.Errorf("usage = %+v", res.Usage)
			}
			reqs, err := s.WaitRequests(testkit.Context(t), 1)
			if err != nil {
				t.Fatal(err)
			}
			r := reqs[0]
			if r.Header.Get("Authorization") != "Bearer "+secret {
				t.Errorf("Authorization = %q", r.Header.Get("Authorization"))
			}
			checkRequestHasNoSecret(t, r)
			var body map[string]any
			if err := r.JSON(&body); err != nil {
				t.Fatal(err)
			}
			switch api {
			case APIResponses:
				if r.Path != "/v1/responses" || body["store"] != false || body["stream"] != true || body["instructions"] != "be brief" ||
					body["previous_response_id"] != nil {
					t.Errorf("%s %v", r.Path, body)
				}
			case APIChat:
				if r.Path != "/v1/chat/completions" || body["stream"] != true ||
					fmt.Sprint(body["stream_options"]) != "map[include_usage:true]" {
					t.Errorf("%s %v", r.Path, body)
				}
			}
		})
	}
}

func TestThinkingAndToolCalls(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			s := newServer(t, providertest.Options{Answer: &providertest.Answer{
				Thinking: []string{"Let me ", "check."},
				Text:     []string{"Checking."},
				Tools: []providertest.ToolCall{
					{ID: "call_1", Name: "get_weather", Args: []string{`{"city": `, `"Paris"}`}},
					{ID: "call_2", Name: "get_time"},
				},
			}})
			res, rec := streamT(t, newClient(t, Options{API: api, BaseURL: s.URL}), request())
			m := res.Message
			if m.StopReason != provider.StopToolUse || rec.Thinking() != "Let me check." || rec.Text() != "Checking." {
				t.Fatalf("result = %+v, deltas %+v", res, rec.All)
			}
			var tools []string
			for _, d := range rec.All {
				if d.ToolCallID != "" {
					tools = append(tools, d.ToolCallID+"/"+d.ToolName+"/"+d.ToolArgsPart)
				}
			}
			want := []string{"call_1/get_weather/", `call_1/get_weather/{"city": `, `call_1/get_weather/"Paris"}`, "call_2/get_time/"}
			if strings.Join(tools, "|") != strings.Join(want, "|") {
				t.Errorf("tool deltas = %q, want %q", tools, want)
			}
			thinking := provider.Block{Type: provider.BlockThinking, Text: "Let me check."}
			if api == APIResponses { // a reasoning item, without encrypted content unless asked for
				thinking.ReasoningID, thinking.Summary = "rs_test0000", []string{"Let me check."}
			}
			wantContent := []provider.Block{
				thinking,
				{Type: provider.BlockText, Text: "Checking."},
				{Type: provider.BlockToolCall, ToolCallID: "call_1", ToolName: "get_weather", ToolInput: json.RawMessage(`{"city":"Paris"}`)},
				{Type: provider.BlockToolCall, ToolCallID: "call_2", ToolName: "get_time", ToolInput: json.RawMessage(`{}`)},
			}
			if got, want := fmt.Sprintf("%+v", m.Content), fmt.Sprintf("%+v", wantContent); got != want {
				t.Errorf("content =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestStopReasons(t *testing.T) {
	for _, api := range apis {
		for _, tc := range []struct {
			answer                providertest.Answer
			stop, details, errMsg string
		}{
			{providertest.Answer{Text: []string{"cut"}, Stop: providertest.StopLength}, provider.StopLength, "", ""},
			{providertest.Answer{Stop: providertest.StopRefusal, Refusal: "I can't help with that."},
				provider.StopError, provider.DetailRefusal, "Refusal: I can't help with that."},
			{providertest.Answer{Text: []string{"some"}, Stop: providertest.StopContentFilter},
				provider.StopError, provider.DetailSensitive, "content_filter: the answer was stopped by the provider's content filter"},
		} {
			s := newServer(t, providertest.Options{Answer: &tc.answer})
			res, _ := streamT(t, newClient(t, Options{API: api, BaseURL: s.URL}), request())
			m := res.Message
			if m.StopReason != tc.stop || m.StopDetails != tc.details || !strings.HasPrefix(m.ErrorMessage, tc.errMsg) || res.Failure != nil {
				t.Errorf("%s %+v: result %+v", api, tc.answer, res)
			}
		}
	}
}

func TestHTTPErrors(t *testing.T) {
	for _, api := range apis {
		for _, tc := range []struct {
			name           string
			step           providertest.Step
			msg, typ, code string
			status         int
			headers        http.Header
		}{
			{"429 rate limit", func() providertest.Step {
				st := providertest.HTTPError(429, "retry-after", "10", "retry-after-ms", "9816")
				for k, v := range providertest.OpenAIRateLimitHeaders() {
					st.Headers[k] = v
				}
				return st
			}(), "429 tokens: Rate limit reached for gpt-4 in organization org-uVqpjtJiKqvVJMVfvpaounIh on tokens per min (TPM)", "tokens", "rate_limit_exceeded", 429,
				http.Header{"Retry-After": {"10"}, "Retry-After-Ms": {"9816"}, "X-Ratelimit-Reset-Tokens": {"6m0s"}, "X-Ratelimit-Remaining-Requests": {"59"}}},
			{"429 insufficient quota", providertest.RawError(429, providertest.OpenAIInsufficientQuota),
				"429 insufficient_quota: You exceeded your current quota", "insufficient_quota", "insufficient_quota", 429, nil},
			{"429 azure", providertest.RawError(429, `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}}`,
				"x-ms-retry-after-ms", "6000"),
				"429 429: Requests to the ChatCompletions_Create Operation", "", "429", 429, http.Header{"X-Ms-Retry-After-Ms": {"6000"}}},
			{"500", providertest.HTTPError(500), "500 server_error: The server had an error while processing your request. Sorry about that!", "server_error", "", 500, nil},
			{"400 context length", providertest.RawError(400, providertest.OpenAIContextLength),
				"400 invalid_request_error: This model's maximum context length is 4097 tokens.", "invalid_request_error", "context_length_exceeded", 400, nil},
			{"401 echoes the key masked", providertest.HTTPError(401),
				"401 invalid_request_error: Incorrect API key provided: [REDACTED]. You can find your API key at https://platform.openai.com/account/api-keys.",
				"invalid_request_error", "invalid_api_key", 401, nil},
			{"502 html", providertest.Step{Kind: providertest.StepHTTPError, Status: 502, ContentType: "text/html",
				Body: "<html><head><title>502 Bad Gateway</title></head><body>cloudflare</body></html>"}, "502 Bad Gateway", "", "", 502, nil},
		} {
			t.Run(api+"/"+tc.name, func(t *testing.T) {
				s := newServer(t, providertest.Options{})
				s.Enqueue(tc.step)
				res, rec := streamT(t, newClient(t, Options{API: api, BaseURL: s.URL}), request())
				m, f := res.Message, res.Failure
				if m.StopReason != provider.StopError || !strings.HasPrefix(m.ErrorMessage, tc.msg) || len(m.Content) != 0 || len(rec.All) != 0 || res.ResetState {
					t.Errorf("result = %+v, want error %q", res, tc.msg)
				}
				if f == nil || f.Status != tc.status || f.Type != tc.typ || f.Code != tc.code {
					t.Fatalf("failure = %+v, want status %d type %q code %q", f, tc.status, tc.typ, tc.code)
				}
				for k, v := range tc.headers {
					if got := f.Headers.Get(k); got != v[0] {
						t.Errorf("header %s = %q, want %q", k, got, v[0])
					}
				}
				if f.Headers.Get("x-request-id") == "" {
					t.Errorf("headers = %v, want the response's", f.Headers)
				}
			})
		}
	}
}

func TestMidStreamErrors(t *testing.T) {
	answer := &providertest.Answer{Text: []string{"Hel", "lo"}}
	quota := providertest.Step{Kind: providertest.StepErrorEvent, ErrorType: "insufficient_quota", ErrorCode: "insufficient_quota",
		ErrorMessage: "You exceeded your current quota, please check your plan and billing details."}
	for _, tc := range []struct {
		name, api string
		step      providertest.Step
		msg       string
		typ, code string
		text      string
	}{
		{"chat data error before content", APIChat, quota,
			"200 insufficient_quota: You exceeded your current quota", "insufficient_quota", "insufficient_quota", ""},
		{"chat data error after content", APIChat, providertest.Step{Kind: providertest.StepErrorEvent, After: 1},
			"200 server_error: The server had an error while processing your request. Sorry about that!", "server_error", "", "Hel"},
		{"responses nested error right after the lifecycle preamble", APIResponses, quota,
			"200 insufficient_quota: You exceeded your current quota", "insufficient_quota", "insufficient_quota", ""},
		{"responses flat error", APIResponses, providertest.Step{Kind: providertest.StepErrorEvent, ErrorShape: providertest.ShapeFlat,
			ErrorCode: "context_length_exceeded", ErrorMessage: "Your input exceeds the context window of this model. Please adjust your input and try again."},
			"200 context_length_exceeded: Your input exceeds the context window of this model.", "", "context_length_exceeded", ""},
		{"responses response.failed", APIResponses, providertest.Step{Kind: providertest.StepErrorEvent, ErrorShape: providertest.ShapeFailed,
			ErrorCode: "server_error", ErrorMessage: "The server had an error while processing your request."},
			"200 server_error: The server had an error while processing your request.", "", "server_error", ""},
		{"responses error then response.failed, after content", APIResponses, providertest.Step{Kind: providertest.StepErrorEvent, After: 3, ThenFailed: true,
			ErrorType: "server_error", ErrorCode: "unknown-error", ErrorMessage: "Foobar"},
			"200 server_error: Foobar", "server_error", "unknown-error", "Hel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, providertest.Options{Answer: answer})
			s.Enqueue(tc.step)
			res, rec := streamT(t, newClient(t, Options{API: tc.api, BaseURL: s.URL}), request())
			m, f := res.Message, res.Failure
			details := ""
			if tc.text != "" {
				details = provider.DetailInterruptedAfterContent
			}
			if m.StopReason != provider.StopError || !strings.HasPrefix(m.ErrorMessage, tc.msg) || m.StopDetails != details ||
				m.Text() != tc.text || rec.Text() != tc.text || m.HasObservableOutput() != (tc.text != "") {
				t.Errorf("message = %+v, want %q details %q text %q", m, tc.msg, details, tc.text)
			}
			if f == nil || f.Status != 200 || f.Type != tc.typ || f.Code != tc.code || f.Headers.Get("x-request-id") == "" {
				t.Errorf("failure = %+v, want 200 %q %q", f, tc.typ, tc.code)
			}
		})
	}
}

func TestTransportFailures(t *testing.T) {
	answer := &providertest.Answer{Text: []string{"Hel", "lo"}, Tools: []providertest.ToolCall{
		{ID: "call_1", Name: "a", Args: []string{`{"x":`, `1}`}},
	}}
	// Body frames. Responses: 0 item added, 1 part added, 2 "Hel", 3 "lo",
	// 4 text done, 5 part done, 6 item done, 7 call added, 8-9 its args,
	// 10 args done, 11 call done. Chat: 0 "Hel", 1 "lo", 2 call start,
	// 3-4 its args, 5 finish, 6 usage.
	for _, tc := range []struct {
		name, api string
		step      providertest.Step
		msg       string
		stop      string
		status    int
		details   string
		text      string
		tools     int
	}{
		{"reset before headers", APIResponses, providertest.Step{Kind: providertest.StepReset, BeforeHeaders: true}, "/v1/responses", provider.StopError, 0, "", "", 0},
		{"reset before headers", APIChat, providertest.Step{Kind: providertest.StepReset, BeforeHeaders: true}, "/v1/chat/completions", provider.StopError, 0, "", "", 0},
		{"empty stream", APIResponses, providertest.Step{Kind: providertest.StepCut, SkipPreamble: true},
			"stream ended before response.completed: unexpected EOF", provider.StopError, 200, "", "", 0},
		{"empty stream", APIChat, providertest.Step{Kind: providertest.StepCut, SkipPreamble: true},
			"stream ended before [DONE]: unexpected EOF", provider.StopError, 200, "", "", 0},
		{"cut after the lifecycle preamble", APIResponses, providertest.Step{Kind: providertest.StepCut},
			"stream ended before response.completed: unexpected EOF", provider.StopError, 200, "", "", 0},
		{"cut mid-answer", APIResponses, providertest.Step{Kind: providertest.StepCut, After: 3},
			"stream ended before response.completed: unexpected EOF", provider.StopError, 200, provider.DetailInterruptedAfterContent, "Hel", 0},
		{"cut mid-answer", APIChat, providertest.Step{Kind: providertest.StepCut, After: 1},
			"stream ended before [DONE]: unexpected EOF", provider.StopError, 200, provider.DetailInterruptedAfterContent, "Hel", 0},
		{"cut mid tool call: stripped", APIResponses, providertest.Step{Kind: providertest.StepCut, After: 9},
			"stream ended before response.completed", provider.StopError, 200, provider.DetailInterruptedAfterContent, "Hello", 0},
		{"cut mid tool call: stripped", APIChat, providertest.Step{Kind: providertest.StepCut, After: 4},
			"stream ended before [DONE]", provider.StopError, 200, provider.DetailInterruptedAfterContent, "Hello", 0},
		{"cut after a completed tool call", APIResponses, providertest.Step{Kind: providertest.StepCut, After: 11},
			"stream ended before response.completed", provider.StopError, 200, provider.DetailInterruptedAfterContent, "Hello", 1},
		{"no response.completed", APIResponses, providertest.Step{Kind: providertest.StepCut, After: providertest.AllFrames},
			"stream ended before response.completed", provider.StopError, 200, provider.DetailInterruptedAfterContent, "Hello", 1},
		{"no [DONE] after finish_reason is accepted", APIChat, providertest.Step{Kind: providertest.StepCut, After: providertest.AllFrames},
			"", provider.StopToolUse, 0, "", "Hello", 1},
		{"reset mid-answer", APIResponses, providertest.Step{Kind: providertest.StepReset, After: 4},
			"stream ended before response.completed: ", provider.StopError, 200, provider.DetailInterruptedAfterContent, "Hello", 0},
		{"reset mid-answer", APIChat, providertest.Step{Kind: providertest.StepReset, After: 2},
			"stream ended before [DONE]: ", provider.StopError, 200, provider.DetailInterruptedAfterContent, "Hello", 0},
	} {
		t.Run(tc.api+"/"+tc.name, func(t *testing.T) {
			s := newServer(t, providertest.Options{Answer: answer})
			s.Enqueue(tc.step)
			res, _ := streamT(t, newClient(t, Options{API: tc.api, BaseURL: s.URL}), request())
			m, f := res.Message, res.Failure
			if m.StopReason != tc.stop || !strings.Contains(m.ErrorMessage, tc.msg) || m.StopDetails != tc.details || m.Text() != tc.text {
				t.Errorf("message = %+v, want %s %q details %q text %q", m, tc.stop, tc.msg, tc.details, tc.text)
			}
			tools := 0
			for _, b := range m.Content {
				if b.Type == provider.BlockToolCall {
					tools++
				}
			}
			if tools != tc.tools {
				t.Errorf("%d tool calls kept, want %d", tools, tc.tools)
			}
			if tc.stop == provider.StopError && (f == nil || f.Status != tc.status) {
				t.Errorf("failure = %+v, want status %d", f, tc.status)
			}
		})
	}
}

func TestConnectionRefusedAndTLS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	tlsSrv := providertest.NewTLSServer(providertest.Options{})
	t.Cleanup(tlsSrv.Close)
	for _, api := range apis {
		res, _ := streamT(t, newClient(t, Options{API: api, BaseURL: "http://" + addr + "/v1"}), request())
		if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || !strings.Contains(m.ErrorMessage, "connection refused") || f == nil || f.Status != 0 {
			t.Errorf("%s refused: %+v", api, res)
		}
		res, _ = streamT(t, newClient(t, Options{API: api, BaseURL: tlsSrv.URL}), request())
		if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || !strings.Contains(m.ErrorMessage, "tls: failed to verify certificate") || f == nil || f.Status != 0 {
			t.Errorf("%s TLS: %+v", api, res)
		}
	}
}

func TestReadTimeoutAndCancel(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			s := newServer(t, providertest.Options{})
			hangAfterHello := providertest.Step{Kind: providertest.StepHang, After: firstDeltaFrame[api] + 1}
			s.Enqueue(hangAfterHello, hangAfterHello)

			c := newClient(t, Options{API: api, BaseURL: s.URL, ReadTimeout: 100 * time.Millisecond})
			res, _ := streamT(t, c, request())
			if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || m.ErrorMessage != "stream read timed out: no data from the provider for 100ms" ||
				m.StopDetails != provider.DetailInterruptedAfterContent || m.Text() != "Hello" || f == nil || f.Status != 200 {
				t.Errorf("read timeout: %+v", res)
			}

			c = newClient(t, Options{API: api, BaseURL: s.URL})
			ctx, cancel := context.WithCancel(testkit.Context(t))
			defer cancel()
			rec := &providertest.Deltas{Hook: func(provider.Delta) { cancel() }}
			res = c.Stream(ctx, request(), rec.On)
			providertest.CheckNoSecret(t, res, secret)
			if m := res.Message; m.StopReason != provider.StopAborted || m.ErrorMessage != provider.AbortedMessage || m.Text() != "Hello" || res.Failure != nil {
				t.Errorf("cancelled: %+v", res)
			}
			reqs, err := s.WaitRequests(testkit.Context(t), 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reqs {
				if !r.ClientGone {
					t.Errorf("request %d: the server did not observe the connection close", r.Index)
				}
			}
		})
	}
}

func TestSecretNeverLeaks(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			s := newServer(t, providertest.Options{APIKey: "sk-the-right-key-0123456789"})
			s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, After: 1, ErrorType: "invalid_request_error",
				ErrorMessage: "key " + secret + " prefix " + secret[:16] + " masked " + providertest.MaskKey(secret)})
			c := newClient(t, Options{API: api, BaseURL: s.URL, AuthHeader: "api-key"})
			// The wrong key: OpenAI's 401 echoes it masked.
			res, _ := streamT(t, c, request())
			if !strings.Contains(res.Message.ErrorMessage, "Incorrect API key provided: [REDACTED].") {
				t.Errorf("401: %q", res.Message.ErrorMessage)
			}
			good := request()
			good.Credential.Secret = "sk-the-right-key-0123456789"
			res = c.Stream(testkit.Context(t), good, nil)
			if res.Message.StopReason != provider.StopError ||
				strings.Contains(res.Message.ErrorMessage, "FAKEKEY") || strings.Contains(res.Message.ErrorMessage, secret[:16]) {
				t.Errorf("in-stream echo: %q", res.Message.ErrorMessage)
			}
			reqs, err := s.WaitRequests(testkit.Context(t), 2)
			if err != nil {
				t.Fatal(err)
			}
			if h := reqs[0].Header; h.Get("api-key") != secret || h.Get("Authorization") != "" {
				t.Errorf("auth headers: %v", h)
			}
			checkRequestHasNoSecret(t, reqs[0])
		})
	}
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct{ base, path, want string }{
		{"", "/responses", "https://api.openai.com/v1/responses"},
		{"https://api.openai.com/v1", "/chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"https://api.openai.com/v1/", "/responses", "https://api.openai.com/v1/responses"},
		{"http://127.0.0.1:8000", "/chat/completions", "http://127.0.0.1:8000/v1/chat/completions"},
		{"http://127.0.0.1:8000/", "/chat/completions", "http://127.0.0.1:8000/v1/chat/completions"},
		{"https://api.groq.com/openai/v1", "/chat/completions", "https://api.groq.com/openai/v1/chat/completions"},
		{"https://x.openai.azure.com/openai/v1", "/responses", "https://x.openai.azure.com/openai/v1/responses"},
		{"https://x.openai.azure.com/openai/deployments/gpt4o?api-version=2024-10-21", "/chat/completions",
			"https://x.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"},
		{"https://gw.example/v1/chat/completions", "/chat/completions", "https://gw.example/v1/chat/completions"},
	} {
		if got := endpoint(tc.base, tc.path); got != tc.want {
			t.Errorf("endpoint(%q, %q) = %q, want %q", tc.base, tc.path, got, tc.want)
		}
	}
}

func TestRequestMapping(t *testing.T) {
	text := func(s string) provider.Block { return provider.Block{Type: provider.BlockText, Text: s} }
	req := &provider.Request{
		Model:  "m",
		System: "sys",
		Messages: []provider.Message{
			userMsg("one"),
			{Role: provider.RoleAssistant, StopReason: provider.StopError, ErrorMessage: "529 overloaded_error: Overloaded"},
			userMsg("again"),
			{Role: provider.RoleAssistant, StopReason: provider.StopToolUse, Content: []provider.Block{
				{Type: provider.BlockThinking, Text: "hmm"},
				text("calling"),
				{Type: provider.BlockToolCall, ToolCallID: "call_1", ToolName: "get", ToolInput: json.RawMessage(`{"k":1}`)},
				{Type: provider.BlockToolCall, ToolCallID: "call_2", ToolName: "none"},
			}},
			{Role: provider.RoleTool, Content: []provider.Block{
				{Type: provider.BlockToolResult, ToolCallID: "call_1", Text: "42"},
				{Type: provider.BlockToolResult, ToolCallID: "call_2", Text: "", IsError: true},
			}},
		},
		Tools: []provider.Tool{{Name: "get", Description: "gets", InputSchema: json.RawMessage(`{"type":"object"}`)}, {Name: "none"}},
	}
	got, _ := json.Marshal(chatBody(req, false))
	want := `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"one"},{"role":"user","content":"again"},` +
		`{"role":"assistant","content":"calling","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"k\":1}"}},` +
		`{"id":"call_2","type":"function","function":{"name":"none","arguments":"{}"}}]},` +
		`{"role":"tool","content":"42","tool_call_id":"call_1"},{"role":"tool","content":"","tool_call_id":"call_2"}],` +
		`"tools":[{"type":"function","function":{"name":"get","description":"gets","parameters":{"type":"object"}}},` +
		`{"type":"function","function":{"name":"none","parameters":{"type":"object","properties":{}}}}],"stream":true,"stream_options":{"include_usage":true}}`
	if string(got) != want {
		t.Errorf("chat body =\n%s\nwant\n%s", got, want)
	}

	var input []inputItem
	for _, m := range req.Messages {
		input = append(input, items(m)...)
	}
	got, _ = json.Marshal(input)
	want = `[{"type":"message","role":"user","content":"one"},{"type":"message","role":"user","content":"again"},` +
		`{"type":"message","role":"assistant","content":"calling"},` +
		`{"type":"function_call","call_id":"call_1","name":"get","arguments":"{\"k\":1}"},` +
		`{"type":"function_call","call_id":"call_2","name":"none","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"42"},{"type":"function_call_output","call_id":"call_2","output":""}]`
	if string(got) != want {
		t.Errorf("responses input =\n%s\nwant\n%s", got, want)
	}
}

func TestUnknownAPI(t *testing.T) {
	res := New(Options{API: "completions"}).Stream(testkit.Context(t), request(), nil)
	if res.Message.StopReason != provider.StopError || !strings.Contains(res.Message.ErrorMessage, `unknown API "completions"`) {
		t.Errorf("result = %+v", res)
	}
}

func TestChatToolCallsWithoutIndex(t *testing.T) {
	// A compatible server sending each whole call in one chunk, all at
	// index 0, then no [DONE].
	frames := `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"a","arguments":"{\"x\":1}"}}]},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"b","arguments":"{}"}}]},"finish_reason":null}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":7}}` + "\n\n"
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 200, ContentType: "text/event-stream", Body: frames})
	res, _ := streamT(t, newClient(t, Options{API: APIChat, BaseURL: s.URL, ChatNoStreamOptions: true}), request())
	m := res.Message
	if m.StopReason != provider.StopToolUse || len(m.Content) != 2 || string(m.Content[0].ToolInput) != `{"x":1}` ||
		m.Content[1].ToolCallID != "call_b" || string(m.Content[1].ToolInput) != `{}` || res.Usage.OutputTokens != 7 {
		t.Errorf("result = %+v", res)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(reqs[0].Body, []byte("stream_options")) {
		t.Errorf("stream_options sent: %s", reqs[0].Body)
	}
}
