package gemini

import (
	"context"
	"encoding/json"
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

// secret is a recognisable fake key (Gemini keys start with "AIza"): no
// text a test sees may contain it, or any 8-character piece of it.
const secret = "AIzaSyFAKEKEYzq7Wx9Vb2Nm4Lk6Jh8Gf0Dd1a2b3c"

const model = "gemini-2.5-flash"

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
		Model:     model,
		System:    "be brief",
		Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hi"}}},
		},
		Credential: provider.Credential{ID: "g1", Secret: secret},
	}
}

func streamT(t *testing.T, c *Client, req *provider.Request) (provider.Result, *providertest.Deltas) {
	t.Helper()
	rec := &providertest.Deltas{}
	res := c.Stream(testkit.Context(t), req, rec.On)
	providertest.CheckNoSecret(t, res, secret)
	return res, rec
}

func TestFramesAreGeminiSSE(t *testing.T) {
	got := providertest.Frames(provider.KindGemini, model, &providertest.Answer{Text: []string{"Hello"}, InputTokens: 8, OutputTokens: 1})
	want := `data: {"candidates": [{"content": {"parts": [{"text": "Hello"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 1,"totalTokenCount": 9,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 8}]},"modelVersion": "gemini-2.5-flash","responseId": "gemresp_test0000"}` + "\r\n\r\n" +
		`data: {"candidates": [{"content": {"parts": [{"text": ""}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 1,"totalTokenCount": 9,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 8}]},"modelVersion": "gemini-2.5-flash","responseId": "gemresp_test0000"}` + "\r\n\r\n"
	if got != want {
		t.Errorf("frames:\n%s\nwant:\n%s", got, want)
	}
}

func TestCompleteStreamIsIncremental(t *testing.T) {
	hold := make(chan struct{})
	s := newServer(t, providertest.Options{APIKey: secret})
	s.Enqueue(providertest.Step{
		Answer:    &providertest.Answer{Text: []string{"Hello", " world", "!"}, InputTokens: 25, OutputTokens: 3},
		Hold:      hold,
		HoldAfter: 1,
	})
	c := newClient(t, Options{BaseURL: s.URL})
	rec := &providertest.Deltas{Hook: func(d provider.Delta) {
		if d.Text == "Hello" {
			close(hold)
		}
	}}
	res := c.Stream(testkit.Context(t), request(), rec.On)
	providertest.CheckNoSecret(t, res, secret)
	m := res.Message
	if m.StopReason != provider.StopEnd || res.Failure != nil || m.Text() != "Hello world!" || len(m.Content) != 1 || m.Model != model {
		t.Fatalf("result = %+v", res)
	}
	if res.Usage != (provider.Usage{InputTokens: 25, OutputTokens: 3}) {
		t.Errorf("usage = %+v", res.Usage)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	r := reqs[0]
	if r.Path != "/v1beta/models/gemini-2.5-flash:streamGenerateContent" || r.Query != "alt=sse" ||
		r.Header.Get("x-goog-api-key") != secret || r.Header.Get("Authorization") != "" {
		t.Errorf("request %s?%s headers %v", r.Path, r.Query, r.Header)
	}
	if strings.Contains(string(r.Body), secret[:10]) || strings.Contains(r.Query, secret[:10]) {
		t.Errorf("the key is outside its header")
	}
	var body struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"contents"`
		SystemInstruction struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"systemInstruction"`
	}
	if err := r.JSON(&body); err != nil {
		t.Fatal(err)
	}
	if len(body.Contents) != 1 || body.Contents[0].Role != "user" || body.Contents[0].Parts[0].Text != "hi" ||
		body.SystemInstruction.Parts[0].Text != "be brief" {
		t.Errorf("body = %s", r.Body)
	}
}

func TestThinkingAndToolCalls(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{
		Thinking:        []string{"Let me ", "check."},
		Tools:           []providertest.ToolCall{{Name: "get_weather", Args: []string{`{"city":`, `"Paris"}`}}, {Name: "get_time", Args: nil}},
		InputTokens:     30,
		OutputTokens:    4,
		CacheReadTokens: 100,
	}})
	c := newClient(t, Options{BaseURL: s.URL})
	req := request()
	req.Params.Thinking = &provider.Thinking{Effort: provider.EffortHigh}
	req.Tools = []provider.Tool{{Name: "get_weather", Description: "weather", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}, {Name: "get_time"}}
	res, rec := streamT(t, c, req)
	m := res.Message
	if m.StopReason != provider.StopToolUse || rec.Thinking() != "Let me check." {
		t.Fatalf("result = %+v", res)
	}
	// thinking (its text), the signature's block before the call it came
	// on, the two calls.
	var types []string
	for _, b := range m.Content {
		types = append(types, b.Type)
	}
	if strings.Join(types, ",") != "thinking,thinking,tool_call,tool_call" {
		t.Fatalf("blocks = %+v", m.Content)
	}
	sig := providertest.GeminiSignature(providertest.DefaultAccount, model)
	if m.Content[0].Text != "Let me check." || m.Content[0].Signature != "" || m.Content[1].Signature != sig || m.Content[1].Text != "" {
		t.Errorf("thinking blocks = %+v", m.Content[:2])
	}
	call := m.Content[2]
	if call.ToolName != "get_weather" || string(call.ToolInput) != `{"city":"Paris"}` || call.ToolCallID == "" || m.Content[3].ToolCallID == call.ToolCallID ||
		string(m.Content[3].ToolInput) != `{}` {
		t.Errorf("calls = %+v", m.Content[2:])
	}
	if u := res.Usage; u.InputTokens != 30 || u.CacheReadTokens != 100 || u.OutputTokens != 4+2 || u.ReasoningTokens != 2 { // output: candidates + thoughts
		t.Errorf("usage = %+v", res.Usage)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = reqs[0].JSON(&body)
	gc, _ := json.Marshal(body["generationConfig"])
	if string(gc) != `{"thinkingConfig":{"includeThoughts":true,"thinkingBudget":16384}}` {
		t.Errorf("generationConfig = %s", gc)
	}
	tools, _ := json.Marshal(body["tools"])
	if !strings.Contains(string(tools), `"parametersJsonSchema":{"properties":{"city":{"type":"string"}},"type":"object"}`) ||
		!strings.Contains(string(tools), `{"name":"get_time","parametersJsonSchema":{"properties":{},"type":"object"}}`) {
		t.Errorf("tools = %s", tools)
	}

	// The next turn sends the calls back with the signature on the first
	// call (where it came), and the results as functionResponse parts by
	// name; the fake accepts the signature (same account and model).
	m.SetOrigin(provider.Origin{Provider: "gemini", Model: model, Account: "g1"})
	req.Messages = append(req.Messages, m, provider.Message{Role: provider.RoleTool, Content: []provider.Block{
		{Type: provider.BlockToolResult, ToolCallID: call.ToolCallID, Text: "sunny"},
		{Type: provider.BlockToolResult, ToolCallID: m.Content[3].ToolCallID, Text: "no clock", IsError: true},
	}})
	s.Enqueue(providertest.Step{Answer: &providertest.Answer{Text: []string{"Sunny."}}})
	res, _ = streamT(t, c, req)
	if res.Message.StopReason != provider.StopEnd || res.Message.Text() != "Sunny." {
		t.Fatalf("second turn: %+v", res)
	}
	reqs, err = s.WaitRequests(testkit.Context(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	var second struct {
		Contents []json.RawMessage `json:"contents"`
	}
	_ = reqs[1].JSON(&second)
	if len(second.Contents) != 3 {
		t.Fatalf("contents = %s", reqs[1].Body)
	}
	wantModel := `{"role":"model","parts":[{"thoughtSignature":"` + sig + `","functionCall":{"name":"get_weather","args":{"city":"Paris"}}},{"functionCall":{"name":"get_time","args":{}}}]}`
	wantUser := `{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"result":"sunny"}}},{"functionResponse":{"name":"get_time","response":{"error":"no clock"}}}]}`
	if string(second.Contents[1]) != wantModel || string(second.Contents[2]) != wantUser {
		t.Errorf("history:\n%s\n%s\nwant\n%s\n%s", second.Contents[1], second.Contents[2], wantModel, wantUser)
	}

	// A signature of another account is refused by the fake as Gemini
	// would; the session strips it by origin (StripForeignReasoning).
	other := providertest.NewServer(providertest.Options{Accounts: map[string]string{secret: "other-org"}})
	t.Cleanup(other.Close)
	res, _ = streamT(t, newClient(t, Options{BaseURL: other.URL}), req)
	if f := res.Failure; f == nil || f.Status != 400 || !strings.Contains(res.Message.ErrorMessage, "Thought signature is not valid") {
		t.Errorf("foreign signature: %+v", res)
	}
	stripped := *req
	stripped.Messages = provider.StripForeignReasoning(req.Messages, provider.Origin{Provider: "gemini", Model: model, Account: "g2"})
	res, _ = streamT(t, newClient(t, Options{BaseURL: other.URL}), &stripped)
	if res.Message.StopReason != provider.StopEnd {
		t.Errorf("stripped: %+v", res)
	}
}

func TestStopReasons(t *testing.T) {
	for _, tc := range []struct {
		stop, want, details string
	}{
		{providertest.StopLength, provider.StopLength, ""},
		{providertest.StopContentFilter, provider.StopError, provider.DetailSensitive},
	} {
		s := newServer(t, providertest.Options{Answer: &providertest.Answer{Text: []string{"a"}, Stop: tc.stop}})
		res, _ := streamT(t, newClient(t, Options{BaseURL: s.URL}), request())
		if m := res.Message; m.StopReason != tc.want || m.StopDetails != tc.details {
			t.Errorf("%s: %+v", tc.stop, m)
		}
	}
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 200, ContentType: "text/event-stream",
		Body: "data: {\"promptFeedback\": {\"blockReason\": \"PROHIBITED_CONTENT\"},\"usageMetadata\": {\"promptTokenCount\": 7,\"totalTokenCount\": 7},\"modelVersion\": \"gemini-2.5-flash\"}\r\n\r\n"})
	s.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 200, ContentType: "text/event-stream",
		Body: "data: {\"candidates\": [{\"content\": {},\"finishReason\": \"MALFORMED_FUNCTION_CALL\",\"index\": 0}]}\r\n\r\n"})
	c := newClient(t, Options{BaseURL: s.URL})
	res, _ := streamT(t, c, request())
	if m := res.Message; m.StopReason != provider.StopError || m.StopDetails != provider.DetailSensitive || !strings.Contains(m.ErrorMessage, "PROHIBITED_CONTENT") {
		t.Errorf("blocked prompt: %+v", m)
	}
	res, _ = streamT(t, c, request())
	if m, f := res.Message, res.Failure; m.StopReason != provider.StopError || f == nil || f.Type != "MALFORMED_FUNCTION_CALL" {
		t.Errorf("malformed call: %+v", res)
	}
}

func TestHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		step      providertest.Step
		status    int
		typ, msg  string
		bodyHas   string
		headerKey string
	}{
		{providertest.HTTPError(429), 429, "RESOURCE_EXHAUSTED", "429 RESOURCE_EXHAUSTED: You exceeded your current quota", `"retryDelay": "45.837906927s"`, ""},
		{providertest.RawError(429, providertest.GeminiDailyQuota), 429, "RESOURCE_EXHAUSTED", "429 RESOURCE_EXHAUSTED: ", "GenerateRequestsPerDayPerProjectPerModel-FreeTier", ""},
		{providertest.HTTPError(503), 503, "UNAVAILABLE", "503 UNAVAILABLE: The model is overloaded. Please try again later.", "", ""},
		{providertest.HTTPError(500), 500, "INTERNAL", "500 INTERNAL: An internal error has occurred.", "", ""},
		{providertest.HTTPError(400), 400, "INVALID_ARGUMENT", "400 INVALID_ARGUMENT: The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).", "", ""},
		{providertest.HTTPError(404), 404, "NOT_FOUND", "404 NOT_FOUND: models/gemini-2.5-flash is not found", "", ""},
		{providertest.HTTPError(504), 504, "DEADLINE_EXCEEDED", "504 DEADLINE_EXCEEDED: ", "", ""},
		{providertest.HTTPError(429, "Retry-After", "7"), 429, "RESOURCE_EXHAUSTED", "429 RESOURCE_EXHAUSTED", "", "Retry-After"},
		{providertest.RawError(502, "<html><head><title>502 Bad Gateway</title></head></html>"), 502, "", "502 Bad Gateway", "", ""},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			s := newServer(t, providertest.Options{})
			s.Enqueue(tc.step)
			res, _ := streamT(t, newClient(t, Options{BaseURL: s.URL}), request())
			m, f := res.Message, res.Failure
			if m.StopReason != provider.StopError || !strings.HasPrefix(m.ErrorMessage, tc.msg) || f == nil || f.Status != tc.status || f.Type != tc.typ {
				t.Fatalf("result = %+v failure %+v", m, f)
			}
			if !strings.Contains(f.Body, tc.bodyHas) {
				t.Errorf("failure body = %s", f.Body)
			}
			if tc.headerKey != "" && f.Headers.Get(tc.headerKey) == "" {
				t.Errorf("headers = %v", f.Headers)
			}
		})
	}
}

func TestMidStreamError(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, After: 1})
	res, _ := streamT(t, newClient(t, Options{BaseURL: s.URL}), request())
	m, f := res.Message, res.Failure
	if m.StopReason != provider.StopError || m.ErrorMessage != "200 UNAVAILABLE: The model is overloaded. Please try again later." ||
		m.StopDetails != provider.DetailInterruptedAfterContent || m.Text() != "Hello" || f == nil || f.Status != 200 || f.Type != "UNAVAILABLE" {
		t.Errorf("result = %+v failure %+v", m, f)
	}
}

func TestIncompleteStreams(t *testing.T) {
	answer := &providertest.Answer{Text: []string{"Hel", "lo"}, Tools: []providertest.ToolCall{{Name: "a", Args: []string{`{"x":1}`}}}}
	for _, tc := range []struct {
		name    string
		step    providertest.Step
		msg     string
		status  int
		details string
		text    string
	}{
		{"reset before headers", providertest.Step{Kind: providertest.StepReset, BeforeHeaders: true}, ":streamGenerateContent", 0, "", ""},
		{"EOF before the first chunk", providertest.Step{Kind: providertest.StepCut}, "gemini stream ended before its first chunk: unexpected EOF", 200, "", ""},
		{"cut mid-answer", providertest.Step{Kind: providertest.StepCut, After: 1}, "stream ended before finishReason: unexpected EOF", 200, provider.DetailInterruptedAfterContent, "Hel"},
		{"cut before the finish chunk", providertest.Step{Kind: providertest.StepCut, After: providertest.AllFrames}, "stream ended before finishReason: unexpected EOF", 200, provider.DetailInterruptedAfterContent, "Hello"},
		{"reset mid-answer", providertest.Step{Kind: providertest.StepReset, After: 2}, "stream ended before finishReason: ", 200, provider.DetailInterruptedAfterContent, "Hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, providertest.Options{Answer: answer})
			s.Enqueue(tc.step)
			res, _ := streamT(t, newClient(t, Options{BaseURL: s.URL}), request())
			m, f := res.Message, res.Failure
			if m.StopReason != provider.StopError || !strings.Contains(m.ErrorMessage, tc.msg) || m.StopDetails != tc.details || m.Text() != tc.text {
				t.Errorf("message = %+v, want error containing %q, details %q, text %q", m, tc.msg, tc.details, tc.text)
			}
			if f == nil || f.Status != tc.status {
				t.Errorf("failure = %+v, want status %d", f, tc.status)
			}
		})
	}
}

func TestTimeoutsAndCancellationCloseTheConnection(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepHang, After: 1}, providertest.Step{Kind: providertest.StepHang, After: 1})
	c := newClient(t, Options{BaseURL: s.URL, ReadTimeout: 100 * time.Millisecond})
	res, _ := streamT(t, c, request())
	if m := res.Message; m.StopReason != provider.StopError || m.ErrorMessage != "stream read timed out: no data from the provider for 100ms" || m.Text() != "Hello" {
		t.Errorf("read timeout: %+v", res)
	}
	c = newClient(t, Options{BaseURL: s.URL})
	ctx, cancel := context.WithCancel(testkit.Context(t))
	defer cancel()
	rec := &providertest.Deltas{Hook: func(provider.Delta) { cancel() }}
	res = c.Stream(ctx, request(), rec.On)
	providertest.CheckNoSecret(t, res, secret)
	if m := res.Message; m.StopReason != provider.StopAborted || m.ErrorMessage != provider.AbortedMessage || res.Failure != nil {
		t.Errorf("cancelled: %+v", res)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if !r.ClientGone {
			t.Errorf("request %d: the server did not see the connection close", r.Index)
		}
	}
}

func TestSecretNeverLeaksAndNoRedirects(t *testing.T) {
	s := newServer(t, providertest.Options{APIKey: "AIzaSyOTHERKEY000000000000000000000000"})
	s.Enqueue()
	c := newClient(t, Options{BaseURL: s.URL, Headers: map[string]string{"x-goog-api-key": "not-this", "x-goog-user-project": "p1"}})
	res, _ := streamT(t, c, request())
	if f := res.Failure; f == nil || f.Status != 400 || !strings.Contains(res.Message.ErrorMessage, "API key not valid") {
		t.Errorf("bad key: %+v", res)
	}
	s2 := newServer(t, providertest.Options{})
	s2.Enqueue(
		providertest.RawError(400, `{"error": {"code": 400,"message": "API key `+secret+` (prefix `+secret[:12]+`) not valid.","status": "INVALID_ARGUMENT"}}`),
		providertest.Step{Kind: providertest.StepHTTPError, Status: 307, Body: " ", Headers: http.Header{"Location": {"http://example.invalid/steal"}}},
	)
	c2 := newClient(t, Options{BaseURL: s2.URL})
	res, _ = streamT(t, c2, request())
	if !strings.Contains(res.Message.ErrorMessage, "[REDACTED]") || strings.Contains(res.Failure.Body, secret[:12]) {
		t.Errorf("echoed key: %+v %s", res.Message, res.Failure.Body)
	}
	res, _ = streamT(t, c2, request())
	if f := res.Failure; f == nil || f.Status != 307 {
		t.Errorf("redirect: %+v", res)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if h := reqs[0].Header; h.Get("x-goog-api-key") != secret || h.Get("x-goog-user-project") != "p1" {
		t.Errorf("headers = %v", h)
	}
}

func TestURL(t *testing.T) {
	for base, want := range map[string]string{
		"":                          DefaultBaseURL + "/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		"http://127.0.0.1:9":        "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		"https://gw.example/v1/":    "https://gw.example/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		"https://gw.example/gemini": "https://gw.example/gemini/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
	} {
		if got := New(Options{BaseURL: base}).URL("models/gemini-2.5-flash"); got != want {
			t.Errorf("URL(%q) = %q, want %q", base, got, want)
		}
	}
}
