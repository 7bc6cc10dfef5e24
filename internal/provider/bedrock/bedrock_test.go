package bedrock

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Recognisable fake AWS keys (the documentation's example pair): no
// result may carry them, or any 8-byte piece of them.
const (
	accessKeyID = "AKIAIOSFODNN7EXAMPLE"
	secretKey   = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	secret      = accessKeyID + ":" + secretKey
	model       = "anthropic.claude-sonnet-4-5-20250929-v1:0"
)

func newFake(t *testing.T) (*providertest.BedrockServer, *Client) {
	t.Helper()
	s := providertest.NewBedrockServer()
	t.Cleanup(s.Close)
	c := New(Options{Region: "us-east-1", Endpoint: s.URL})
	t.Cleanup(c.CloseIdleConnections)
	return s, c
}

func request() *provider.Request {
	return &provider.Request{
		SessionID: "s1",
		Model:     model,
		System:    "be brief",
		Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hi"}}},
		},
		Credential: provider.Credential{ID: "aws-a", Secret: secret},
	}
}

func streamT(t *testing.T, c *Client, req *provider.Request) (provider.Result, *providertest.Deltas) {
	t.Helper()
	rec := &providertest.Deltas{}
	res := c.Stream(testkit.Context(t), req, rec.On)
	providertest.CheckNoSecret(t, res, secret)
	return res, rec
}

func TestCompleteStream(t *testing.T) {
	s, c := newFake(t)
	s.Enqueue(providertest.Step{Answer: &providertest.Answer{
		Thinking:    []string{"Let me ", "think."},
		Text:        []string{"Hello", " world"},
		Tools:       []providertest.ToolCall{{ID: "tooluse_1", Name: "get_weather", Args: []string{`{"city":`, `"Paris"}`}}},
		InputTokens: 40, OutputTokens: 12, CacheReadTokens: 300, CacheWriteTokens: 20,
	}})
	req := request()
	req.Tools = []provider.Tool{{Name: "get_weather", Description: "weather", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
	req.Params = provider.Params{Thinking: &provider.Thinking{Effort: provider.EffortLow}}
	res, rec := streamT(t, c, req)
	m := res.Message
	if m.StopReason != provider.StopToolUse || m.ErrorMessage != "" || res.Failure != nil {
		t.Fatalf("result = %+v", res)
	}
	if rec.Text() != "Hello world" || rec.Thinking() != "Let me think." {
		t.Errorf("deltas: text %q thinking %q", rec.Text(), rec.Thinking())
	}
	if len(m.Content) != 3 {
		t.Fatalf("content = %+v", m.Content)
	}
	th, tx, tc := m.Content[0], m.Content[1], m.Content[2]
	if th.Type != provider.BlockThinking || th.Text != "Let me think." || th.Signature != providertest.BedrockSignature(model, "Let me think.") {
		t.Errorf("thinking = %+v", th)
	}
	if tx.Type != provider.BlockText || tx.Text != "Hello world" {
		t.Errorf("text = %+v", tx)
	}
	if tc.Type != provider.BlockToolCall || tc.ToolCallID != "tooluse_1" || tc.ToolName != "get_weather" || string(tc.ToolInput) != `{"city":"Paris"}` {
		t.Errorf("tool call = %+v", tc)
	}
	if u := res.Usage; u.InputTokens != 40 || u.OutputTokens != 12 || u.CacheReadTokens != 300 || u.CacheWriteTokens != 20 {
		t.Errorf("usage = %+v", res.Usage)
	}

	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/model/"+model+"/converse-stream" || r.Model != model {
		t.Errorf("path %q model %q", r.Path, r.Model)
	}
	// SigV4 with the credential's key for bedrock in the region.
	if a := r.Header.Get("Authorization"); !strings.HasPrefix(a, "AWS4-HMAC-SHA256 Credential="+accessKeyID+"/") || !strings.Contains(a, "/us-east-1/bedrock/aws4_request") {
		t.Errorf("Authorization = %q", a)
	}
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
		System          []struct{ Text string } `json:"system"`
		InferenceConfig struct {
			MaxTokens int `json:"maxTokens"`
		} `json:"inferenceConfig"`
		ToolConfig struct {
			Tools []struct {
				ToolSpec struct {
					Name        string `json:"name"`
					InputSchema struct {
						JSON map[string]any `json:"json"`
					} `json:"inputSchema"`
				} `json:"toolSpec"`
			} `json:"tools"`
		} `json:"toolConfig"`
		AdditionalModelRequestFields struct {
			Thinking struct {
				Type         string `json:"type"`
				BudgetTokens int    `json:"budget_tokens"`
			} `json:"thinking"`
		} `json:"additionalModelRequestFields"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	if len(body.Messages) != 1 || body.Messages[0].Role != "user" || body.Messages[0].Content[0].Text != "hi" ||
		len(body.System) != 1 || body.System[0].Text != "be brief" {
		t.Errorf("body = %s", r.Body)
	}
	if th := body.AdditionalModelRequestFields.Thinking; th.Type != "enabled" || th.BudgetTokens != 1024 || body.InferenceConfig.MaxTokens != 1024+DefaultMaxTokens {
		t.Errorf("thinking/max tokens in %s", r.Body)
	}
	if ts := body.ToolConfig.Tools; len(ts) != 1 || ts[0].ToolSpec.Name != "get_weather" || ts[0].ToolSpec.InputSchema.JSON["type"] != "object" {
		t.Errorf("tools in %s", r.Body)
	}
}

// The history maps onto Converse turns: tool calls and results, signed
// reasoning back in its place, unsigned thinking dropped, redacted
// content back as bytes.
func TestHistory(t *testing.T) {
	s, c := newFake(t)
	req := request()
	redacted := base64.StdEncoding.EncodeToString([]byte("opaque"))
	req.Messages = append(req.Messages,
		provider.Message{Role: provider.RoleAssistant, StopReason: provider.StopToolUse, Content: []provider.Block{
			{Type: provider.BlockRedactedThinking, Data: redacted},
			{Type: provider.BlockThinking, Text: "plan", Signature: "sig-1"},
			{Type: provider.BlockThinking, Text: "unsigned"},
			{Type: provider.BlockText, Text: ""},
			{Type: provider.BlockToolCall, ToolCallID: "t1", ToolName: "ls", ToolInput: json.RawMessage(`{"dir":"/"}`)},
		}},
		provider.Message{Role: provider.RoleTool, Content: []provider.Block{{Type: provider.BlockToolResult, ToolCallID: "t1", Text: "a b", IsError: true}}},
		provider.Message{Role: provider.RoleAssistant, StopReason: provider.StopError},
	)
	req.Params.Thinking = &provider.Thinking{}
	if res, _ := streamT(t, c, req); res.Message.StopReason != provider.StopEnd {
		t.Fatalf("result = %+v", res)
	}
	var body struct {
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	r := s.Requests()[0]
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 3 || body.Messages[1].Role != "assistant" || body.Messages[2].Role != "user" {
		t.Fatalf("messages = %s", r.Body)
	}
	got := func(i int) string {
		var b strings.Builder
		for _, c := range body.Messages[i].Content {
			b.Write(c)
			b.WriteByte('\n')
		}
		return b.String()
	}
	want := `{"reasoningContent":{"redactedContent":"` + redacted + `"}}
{"reasoningContent":{"reasoningText":{"signature":"sig-1","text":"plan"}}}
{"toolUse":{"input":{"dir":"/"},"name":"ls","toolUseId":"t1"}}
`
	if g := got(1); g != want {
		t.Errorf("assistant turn:\n%s\nwant:\n%s", g, want)
	}
	if g := got(2); g != `{"toolResult":{"content":[{"text":"a b"}],"status":"error","toolUseId":"t1"}}`+"\n" {
		t.Errorf("tool result turn: %s", g)
	}
}

func TestErrorAnswers(t *testing.T) {
	for _, tc := range []struct {
		status    int
		exception string
		msg       string
	}{
		{429, "ThrottlingException", providertest.BedrockTooManyRequests},
		{429, "ThrottlingException", providertest.BedrockTooManyTokensDaily},
		{503, "ServiceUnavailableException", providertest.BedrockUnavailable},
		{400, "ValidationException", providertest.BedrockInputTooLong},
		{403, "AccessDeniedException", providertest.BedrockAccessDenied},
		{429, "ModelNotReadyException", "Model is not ready to serve inference requests."},
	} {
		t.Run(tc.exception, func(t *testing.T) {
			s, c := newFake(t)
			s.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: tc.status, ErrorType: tc.exception, ErrorMessage: tc.msg})
			res, _ := streamT(t, c, request())
			want := provider.HTTPErrorMessage(tc.status, tc.exception, tc.msg)
			if res.Message.StopReason != provider.StopError || res.Message.ErrorMessage != want {
				t.Errorf("message = %q, want %q", res.Message.ErrorMessage, want)
			}
			f := res.Failure
			if f == nil || f.Status != tc.status || f.Type != tc.exception || f.Headers.Get("X-Amzn-Requestid") == "" {
				t.Errorf("failure = %+v", f)
			}
			// The SDK's retries are off: one attempt.
			if n := len(s.Requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

func TestMidStreamExceptions(t *testing.T) {
	for _, exc := range []string{"throttlingException", "serviceUnavailableException", "modelStreamErrorException", "validationException", "internalServerException"} {
		t.Run(exc, func(t *testing.T) {
			s, c := newFake(t)
			s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, ErrorType: exc, After: 1,
				Answer: &providertest.Answer{Text: []string{"Hel", "lo"}}})
			res, rec := streamT(t, c, request())
			m := res.Message
			name := strings.ToUpper(exc[:1]) + exc[1:]
			if m.StopReason != provider.StopError || !strings.HasPrefix(m.ErrorMessage, "200 "+name+": ") {
				t.Errorf("message = %+v", m)
			}
			if m.StopDetails != provider.DetailInterruptedAfterContent || m.Text() != "Hel" || rec.Text() != "Hel" {
				t.Errorf("after content: details %q text %q deltas %q", m.StopDetails, m.Text(), rec.Text())
			}
			if f := res.Failure; f == nil || f.Status != 200 || f.Type != name {
				t.Errorf("failure = %+v", f)
			}
		})
	}
	// Before any content: no interruption detail.
	s, c := newFake(t)
	s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, ErrorType: "throttlingException", ErrorMessage: providertest.BedrockTooManyTokensDaily})
	res, _ := streamT(t, c, request())
	if m := res.Message; m.ErrorMessage != "200 ThrottlingException: "+providertest.BedrockTooManyTokensDaily || m.StopDetails != "" {
		t.Errorf("message = %+v", m)
	}
}

func TestIncompleteStream(t *testing.T) {
	s, c := newFake(t)
	s.Enqueue(
		providertest.Step{Kind: providertest.StepCut, After: 1, Answer: &providertest.Answer{Text: []string{"a", "b"}}},
		providertest.Step{Kind: providertest.StepCut, SkipPreamble: true},
		providertest.Step{Kind: providertest.StepCut, After: providertest.AllFrames},
	)
	for i, want := range []string{"bedrock stream ended before messageStop", "bedrock stream ended before messageStart", "bedrock stream ended before messageStop"} {
		res, _ := streamT(t, c, request())
		if res.Message.StopReason != provider.StopError || !strings.HasPrefix(res.Message.ErrorMessage, want) {
			t.Errorf("cut %d: %+v", i, res.Message)
		}
	}
}

func TestCancelClosesConnection(t *testing.T) {
	s, c := newFake(t)
	s.Enqueue(providertest.Step{Kind: providertest.StepHang, After: 1, Answer: &providertest.Answer{Text: []string{"partial", "more"}}})
	ctx, cancel := context.WithCancel(testkit.Context(t))
	defer cancel()
	res := c.Stream(ctx, request(), func(d provider.Delta) {
		if d.Text != "" {
			cancel()
		}
	})
	if res.Message.StopReason != provider.StopAborted || res.Message.ErrorMessage != provider.AbortedMessage || res.Message.Text() != "partial" {
		t.Errorf("result = %+v", res.Message)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	if !reqs[0].ClientGone {
		t.Error("the server did not see the client go")
	}
}

func TestReadTimeout(t *testing.T) {
	s := providertest.NewBedrockServer()
	t.Cleanup(s.Close)
	c := New(Options{Region: "us-east-1", Endpoint: s.URL, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(c.CloseIdleConnections)
	s.Enqueue(providertest.Step{Kind: providertest.StepHang, After: 1, Answer: &providertest.Answer{Text: []string{"x", "y"}}})
	res, _ := streamT(t, c, request())
	if m := res.Message; m.StopReason != provider.StopError || !strings.Contains(m.ErrorMessage, "stream read timed out") || m.StopDetails != provider.DetailInterruptedAfterContent {
		t.Errorf("result = %+v", m)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	var hits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(other.Close)
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redir.Close)
	c := New(Options{Region: "us-east-1", Endpoint: redir.URL})
	t.Cleanup(c.CloseIdleConnections)
	res, _ := streamT(t, c, request())
	if res.Message.StopReason != provider.StopError || res.Failure == nil || res.Failure.Status != http.StatusTemporaryRedirect {
		t.Errorf("result = %+v failure %+v", res.Message, res.Failure)
	}
	if hits.Load() != 0 {
		t.Error("the redirect was followed")
	}
}

func TestBadCredential(t *testing.T) {
	_, c := newFake(t)
	req := request()
	req.Credential.Secret = "only-one-part-" + secretKey
	res := c.Stream(testkit.Context(t), req, nil)
	providertest.CheckNoSecret(t, res, secretKey)
	if res.Message.StopReason != provider.StopError || !strings.Contains(res.Message.ErrorMessage, "ACCESS_KEY_ID:SECRET_ACCESS_KEY") {
		t.Errorf("result = %+v", res.Message)
	}
}

// A call without a credential signs with the standard chain (here the
// environment's keys).
func TestDefaultChain(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENVEXAMPLE000001")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "envSecretKeyEXAMPLE0000000000000000000000")
	t.Setenv("AWS_REGION", "eu-west-3")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	s := providertest.NewBedrockServer()
	t.Cleanup(s.Close)
	c := New(Options{Endpoint: s.URL})
	t.Cleanup(c.CloseIdleConnections)
	req := request()
	req.Credential = provider.Credential{}
	res := c.Stream(testkit.Context(t), req, nil)
	providertest.CheckNoSecret(t, res, "envSecretKeyEXAMPLE0000000000000000000000")
	if res.Message.StopReason != provider.StopEnd {
		t.Fatalf("result = %+v", res.Message)
	}
	if a := s.Requests()[0].Header.Get("Authorization"); !strings.Contains(a, "Credential=AKIAENVEXAMPLE000001/") || !strings.Contains(a, "/eu-west-3/bedrock/") {
		t.Errorf("Authorization = %q", a)
	}
}

// Many sessions stream through one client at once, with and without a
// credential (the default chain is loaded once, under the race detector).
func TestConcurrentStreams(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAENVEXAMPLE000001")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "envSecretKeyEXAMPLE0000000000000000000000")
	t.Setenv("AWS_REGION", "eu-west-3")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	s := providertest.NewBedrockServer()
	t.Cleanup(s.Close)
	c := New(Options{Endpoint: s.URL})
	t.Cleanup(c.CloseIdleConnections)
	s.Script = func(r *providertest.Request) providertest.Step {
		if r.Index%5 == 0 {
			return providertest.Step{Kind: providertest.StepErrorEvent, After: 1, ErrorType: "throttlingException"}
		}
		return providertest.Step{}
	}
	const n = 40
	results := make(chan provider.Result, n)
	for i := range n {
		go func() {
			req := request()
			if i%2 == 0 {
				req.Credential = provider.Credential{}
			}
			results <- c.Stream(testkit.Context(t), req, nil)
		}()
	}
	ok, failed := 0, 0
	for range n {
		res := <-results
		providertest.CheckNoSecret(t, res, secret)
		switch {
		case res.Message.StopReason == provider.StopEnd && res.Message.Text() == "Hello!":
			ok++
		case res.Message.StopReason == provider.StopError && strings.HasPrefix(res.Message.ErrorMessage, "200 ThrottlingException: "):
			failed++
		default:
			t.Errorf("result = %+v", res.Message)
		}
	}
	if ok+failed != n || failed != n/5 {
		t.Errorf("%d ok, %d failed", ok, failed)
	}
}

// The standard chain includes a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK
// (sent as a bearer token); a call with a credential signs with the
// credential's keys all the same.
func TestBearerTokenEnv(t *testing.T) {
	const token = "ABSKQmVkcm9ja0FQSUtleS1FWEFNUExFMDAwMDAwMDAwMDAw"
	t.Setenv("AWS_BEARER_TOKEN_BEDROCK", token)
	t.Setenv("AWS_REGION", "us-west-2")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	s, c := newFake(t)
	res, _ := streamT(t, c, request())
	if res.Message.StopReason != provider.StopEnd {
		t.Fatalf("result = %+v", res.Message)
	}
	if a := s.Requests()[0].Header.Get("Authorization"); !strings.HasPrefix(a, "AWS4-HMAC-SHA256 Credential="+accessKeyID+"/") {
		t.Errorf("with a credential: Authorization = %q", a)
	}
	c2 := New(Options{Endpoint: s.URL})
	t.Cleanup(c2.CloseIdleConnections)
	req := request()
	req.Credential = provider.Credential{}
	res = c2.Stream(testkit.Context(t), req, nil)
	providertest.CheckNoSecret(t, res, token)
	// The SDK sends a bearer token only over HTTPS: against the plain-HTTP
	// fake it refuses, which shows it chose the token.
	if len(s.Requests()) != 1 || !strings.Contains(res.Message.ErrorMessage, "bearer token with HTTP request requires HTTPS") {
		t.Errorf("without a credential: %+v", res.Message)
	}
}

// A body cut in the middle of a frame is an error too, not a short answer.
func TestTruncatedFrame(t *testing.T) {
	events := providertest.BedrockEvents(&providertest.Answer{Model: model, Text: []string{"Hello", "!"}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		_, _ = w.Write(events[0])
		_, _ = w.Write(events[1])
		_, _ = w.Write(events[2][:len(events[2])/2])
	}))
	t.Cleanup(srv.Close)
	c := New(Options{Region: "us-east-1", Endpoint: srv.URL})
	t.Cleanup(c.CloseIdleConnections)
	res, rec := streamT(t, c, request())
	if m := res.Message; m.StopReason != provider.StopError || m.StopDetails != provider.DetailInterruptedAfterContent || rec.Text() != "Hello" {
		t.Errorf("result = %+v, deltas %q", m, rec.Text())
	}
	if !strings.Contains(res.Message.ErrorMessage, "EOF") {
		t.Errorf("error = %q", res.Message.ErrorMessage)
	}
}
