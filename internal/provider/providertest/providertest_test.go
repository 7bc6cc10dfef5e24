package providertest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// docStream is the basic Anthropic Messages stream, verbatim (the Anthropic
// stream format).
const docStream = `event: message_start
data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-opus-4-1-20250805", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}

event: content_block_start
data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}

event: content_block_delta
data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "!"}}

event: content_block_stop
data: {"type": "content_block_stop", "index": 0}

event: message_delta
data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}

event: message_stop
data: {"type": "message_stop"}

`

func TestAnthropicDocumentedStream(t *testing.T) {
	a := &Answer{ID: "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", Text: []string{"Hello", "!"}, InputTokens: 25, OutputTokens: 15}
	got := Frames(provider.KindAnthropic, "claude-opus-4-1-20250805", a)
	if got != docStream {
		t.Errorf("Frames(anthropic) =\n%s\nwant\n%s", got, docStream)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func post(t *testing.T, s *Server, path, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := s.Client()
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseData returns the data lines of an SSE body.
func sseData(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestEveryFrameIsJSON(t *testing.T) {
	a := &Answer{
		Thinking: []string{"Let me ", "think."}, Text: []string{"Hi ", "<there> & you"},
		Tools: []ToolCall{{Name: "get_weather", Args: []string{`{"city":`, `"Paris"}`}}},
	}
	for _, kind := range []string{provider.KindAnthropic, provider.KindOpenAIResponses, provider.KindOpenAIChat} {
		for _, stop := range []string{"", StopLength, StopRefusal, StopContentFilter} {
			a.Stop = stop
			for _, d := range sseData(t, strings.NewReader(Frames(kind, "m", a))) {
				if d == "[DONE]" {
					continue
				}
				if !json.Valid([]byte(d)) {
					t.Errorf("%s stop %q: invalid JSON frame %s", kind, stop, d)
				}
			}
		}
	}
}

func TestResponsesSequenceNumbers(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	s.Enqueue(Step{Kind: StepErrorEvent, After: 3, ThenFailed: true})
	resp := post(t, s, "/v1/responses", `{"model":"gpt-5","stream":true}`)
	defer resp.Body.Close()
	data := sseData(t, resp.Body)
	for i, d := range data {
		var ev struct {
			Type string `json:"type"`
			Seq  int    `json:"sequence_number"`
		}
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Seq != i {
			t.Errorf("event %d (%s): sequence_number %d", i, ev.Type, ev.Seq)
		}
	}
	if n := len(data); n != 2+3+2 {
		t.Errorf("%d events, want preamble 2 + body 3 + error + response.failed", n)
	}
	if !strings.Contains(data[len(data)-2], `"error":{"type":"server_error","code":"server_error","message":"The server had an error`) {
		t.Errorf("error event = %s", data[len(data)-2])
	}
}

func TestHTTPErrorAndRecording(t *testing.T) {
	s := NewServer(Options{APIKey: "sk-test-0123456789abcdef"})
	defer s.Close()
	s.Enqueue(HTTPError(529, "retry-after", "3"))

	resp := post(t, s, "/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, "Authorization", "Bearer sk-wrong-0123456789abcdef")
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 401 || !strings.Contains(string(b), "Incorrect API key provided: "+MaskKey("sk-wrong-0123456789abcdef")+".") {
		t.Errorf("wrong key: %d %s", resp.StatusCode, b)
	}
	resp = post(t, s, "/v1/messages", `{"model":"claude","messages":[{"role":"user","content":"hi there"}]}`, "x-api-key", "sk-test-0123456789abcdef")
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 529 || string(b) != AnthropicOverloaded || resp.Header.Get("retry-after") != "3" || resp.Header.Get("request-id") == "" {
		t.Errorf("529: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	reqs, err := s.WaitRequests(ctxT(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[1].Kind != provider.KindAnthropic || reqs[1].Model != "claude" || reqs[1].LastUserText() != "hi there" || reqs[1].Step.Status != 529 {
		t.Errorf("recorded %+v", reqs[1])
	}
}

func TestHangEndsWhenClientGoes(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	s.Enqueue(Step{Kind: StepHang, After: 2})
	ctx, cancel := context.WithCancel(ctxT(t))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/messages", strings.NewReader(`{}`))
	c := s.Client()
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // event: message_start
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	reqs, err := s.WaitRequests(ctxT(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !reqs[0].ClientGone {
		t.Errorf("ClientGone = false after the client cancelled")
	}
}

// TestErrorEventsAsDocumented checks the mid-stream error frames against the
// providers' own bodies (bodies.go).
func TestErrorEventsAsDocumented(t *testing.T) {
	for _, tc := range []struct {
		path string
		step Step
		want string
	}{
		{"/v1/messages", Step{Kind: StepErrorEvent},
			"event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n"},
		{"/v1/responses", Step{Kind: StepErrorEvent, ErrorType: "invalid_request_error", ErrorCode: "context_length_exceeded",
			ErrorMessage: "Your input exceeds the context window of this model. Please adjust your input and try again.", ErrorParam: "input"},
			"event: error\ndata: " + `{"type":"error","sequence_number":2,"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again.","param":"input"}}` + "\n\n"},
		{"/v1/responses", Step{Kind: StepErrorEvent, ErrorCode: "unknown-error", ErrorMessage: "Foobar"},
			"event: error\ndata: " + `{"type":"error","sequence_number":2,"error":{"code":"unknown-error","message":"Foobar","param":null}}` + "\n\n"},
		{"/v1/chat/completions", Step{Kind: StepErrorEvent, ErrorType: "insufficient_quota", ErrorCode: "insufficient_quota", ErrorMessage: "You exceeded your current quota."},
			"data: " + `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}` + "\n\n"},
	} {
		s := NewServer(Options{})
		s.Enqueue(tc.step)
		resp := post(t, s, tc.path, `{"model":"m","stream":true}`)
		b, _ := io.ReadAll(resp.Body)
		if !strings.HasSuffix(string(b), tc.want) {
			t.Errorf("%s: stream ends\n%s\nwant\n%s", tc.path, b, tc.want)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Errorf("%s: %d %v", tc.path, resp.StatusCode, resp.Header)
		}
		s.Close()
	}
}

func TestScriptAndWords(t *testing.T) {
	if got := strings.Join(Words("  hello  brave\nworld"), "|"); got != "  |hello  |brave\n|world" {
		t.Errorf("Words = %q", got)
	}
	s := NewServer(Options{Script: func(r *Request) Step {
		if r.LastUserText() == "fail" {
			return HTTPError(500)
		}
		return Step{Answer: &Answer{Text: Words("echo: " + r.LastUserText())}}
	}})
	defer s.Close()
	resp := post(t, s, "/v1/responses", `{"model":"m","input":[{"type":"message","role":"user","content":"fail"}]}`)
	if resp.StatusCode != 500 {
		t.Errorf("scripted failure: %d", resp.StatusCode)
	}
	resp = post(t, s, "/openai/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi you"}]}]}`)
	var text strings.Builder
	for _, d := range sseData(t, resp.Body) {
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if d != "[DONE]" && json.Unmarshal([]byte(d), &ch) == nil && len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if text.String() != "echo: hi you" {
		t.Errorf("scripted answer = %q", text.String())
	}
	reqs, err := s.WaitRequests(ctxT(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[1].Kind != provider.KindOpenAIChat || reqs[1].ClientGone || !reqs[1].Done {
		t.Errorf("recorded %+v", reqs[1])
	}
}
