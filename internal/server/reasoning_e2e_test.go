package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// Model parameters, thinking and reasoning state end to end: agentd from a
// configuration file, its providers pointed at the fake, driven over REST
// and SSE (and gRPC for the errors).

const (
	e2eKeyOne = "sk-ant-e2e-one-0123456789"
	e2eKeyTwo = "sk-ant-e2e-two-0123456789"
	e2eKeyOAI = "sk-oai-e2e-0123456789"
	e2eModel  = "claude-sonnet-4-5"
)

// reasoningConfig is agentd's configuration against fake: anth (Anthropic,
// with a catalog) with credentials one and two of the given configured
// accounts, oai (OpenAI Responses with encrypted reasoning), and the chain
// default: oai/gpt-5.
//
// Its anthropic provider takes the next key at every call
// (sticky_credentials: false): a session moves between the two accounts
// mid-loop, the worst case for reasoning state.
func reasoningConfig(fake *providertest.Server, accountOne, accountTwo string) string {
	return fmt.Sprintf(`retry: {base_delay_ms: 10, fallback_chains: {default: [oai/gpt-5]}}
providers:
  - name: anth
    kind: anthropic
    sticky_credentials: false
    base_url: %s
    models:
      - {name: %s, context_window: 200000, max_output_tokens: 64000, supports_thinking: true, supports_tools: true}
      - {name: claude-3-haiku, supports_thinking: false}
    credentials:
      - {id: one, api_key: %s, account: %s}
      - {id: two, api_key: %s, account: %s}
  - name: oai
    kind: openai-responses
    base_url: %s/v1
    encrypted_reasoning: true
    models: [gpt-5]
    credentials: [{id: o, api_key: %s, account: org-x}]
`, fake.URL, e2eModel, e2eKeyOne, accountOne, e2eKeyTwo, accountTwo, fake.URL, e2eKeyOAI)
}

// e2eToolRounds answers rounds tool calls, then text, thinking (a thought
// of its own per request) whenever the request asks for it.
func e2eToolRounds(rounds int) func(*providertest.Request) providertest.Step {
	return func(r *providertest.Request) providertest.Step {
		n := bytes.Count(r.Body, []byte(`"tool_result"`)) + bytes.Count(r.Body, []byte(`"function_call_output"`))
		a := &providertest.Answer{}
		if e2eThinks(r) {
			a.Thinking = []string{fmt.Sprintf("Request %d thinks ", r.Index), "about the weather."}
		}
		if n < rounds {
			a.Tools = []providertest.ToolCall{{Name: "get_weather", Args: []string{`{"city":"Paris"}`}}}
		} else {
			a.Text = []string{"Sunny."}
		}
		return providertest.Step{Answer: a}
	}
}

func e2eThinks(r *providertest.Request) bool {
	var body struct {
		Thinking  *struct{ Type string }   `json:"thinking"`
		Reasoning *struct{ Effort string } `json:"reasoning"`
	}
	_ = json.Unmarshal(r.Body, &body)
	return body.Thinking != nil && body.Thinking.Type == "enabled" || body.Reasoning != nil
}

// e2eSignatures are the signatures of the thinking blocks a request sent.
func e2eSignatures(t *testing.T, r providertest.Request) []string {
	t.Helper()
	var body struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range body.Messages {
		var blocks []struct {
			Type      string `json:"type"`
			Signature string `json:"signature"`
		}
		_ = json.Unmarshal(m.Content, &blocks)
		for _, b := range blocks {
			if b.Type == "thinking" {
				out = append(out, b.Signature)
			}
		}
	}
	return out
}

// e2eSig is the signature the fake gave request r's answer for account.
func e2eSig(r providertest.Request, account string) string {
	return providertest.AnthropicSignature(account, r.Model, strings.Join(r.Step.Answer.Thinking, ""))
}

func e2eAccepted(t *testing.T, reqs []providertest.Request, except ...int) {
	t.Helper()
	for _, r := range reqs {
		if k := r.Step.Kind; !slices.Contains(except, r.Index) && k != "" && k != providertest.StepOK {
			t.Errorf("request %d was refused: %d %s", r.Index, r.Step.Status, r.Step.Body)
		}
	}
}

// ssePrompt posts a prompt (body: the JSON request) as an event stream,
// answers every tool call with "sunny" over REST, and returns the frames
// and the raw stream.
func ssePrompt(t *testing.T, ts *testServer, id, body string) ([]sseFrame, string) {
	t.Helper()
	ctx := testkit.Context(t)
	resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt", body, http.Header{"Accept": {"text/event-stream"}})
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("prompt = %d %s", resp.StatusCode, b)
	}
	var raw bytes.Buffer
	frames := readSSE(t, io.TeeReader(resp.Body, &raw), func(f sseFrame) bool {
		if f.event == "tool_call" {
			callID := f.data["toolCall"].(map[string]any)["callId"].(string)
			r := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":submitToolResults", `{"results":[{"callId":"`+callID+`","content":"sunny"}]}`, nil)
			r.Body.Close()
			if r.StatusCode != 200 {
				t.Errorf("submitToolResults = %d", r.StatusCode)
			}
		}
		return false
	})
	if last := frames[len(frames)-1]; last.event != "prompt_end" {
		t.Fatalf("last frame = %+v", last)
	}
	return frames, raw.String()
}

func outcome(frames []sseFrame) string {
	return frames[len(frames)-1].data["promptEnd"].(map[string]any)["outcome"].(string)
}

func framesOf(frames []sseFrame, event string) []map[string]any {
	var out []map[string]any
	for _, f := range frames {
		if f.event == event {
			out = append(out, f.data[toCamel(event)].(map[string]any))
		}
	}
	return out
}

// toCamel is an event type's payload field: auto_retry_start → autoRetryStart.
func toCamel(s string) string {
	parts := strings.Split(s, "_")
	for i := 1; i < len(parts); i++ {
		parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
	}
	return strings.Join(parts, "")
}

func getJSON(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s = %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

const thinkingSession = `{"model":"anth/claude-sonnet-4-5","tools":[{"name":"get_weather","inputSchema":{"type":"object"}}],
"params":{"maxTokens":8192,"thinking":{"budgetTokens":2048}}}`

// A tool loop with thinking over REST and SSE: two tool rounds, every call
// accepted with the signatures sent back byte for byte, one of them across
// a rotation inside the account (keys one and two, account acme). The
// thinking text streams and shows in ListMessages; no signature, redacted
// data or encrypted content shows in any event or answer.
func TestThinkingToolLoopOverREST(t *testing.T) {
	script := e2eToolRounds(2)
	fake := providertest.NewServer(providertest.Options{
		Accounts: map[string]string{e2eKeyOne: "acme", e2eKeyTwo: "acme"},
		Script: func(r *providertest.Request) providertest.Step {
			s := script(r)
			if r.Index == 0 {
				s.Answer.Redacted = []string{"REDACTED-OPAQUE-DATA"}
			}
			return s
		},
	})
	defer fake.Close()
	ts := start(t, reasoningConfig(fake, "acme", "acme"))
	id := createREST(t, testkit.Context(t), ts.baseURL, thinkingSession, nil)
	frames, raw := ssePrompt(t, ts, id, `{"text":"weather in Paris?"}`)
	if outcome(frames) != "completed" {
		t.Fatalf("outcome = %s", outcome(frames))
	}
	reqs := fake.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	e2eAccepted(t, reqs)
	sig0, sig1 := e2eSig(reqs[0], "acme"), e2eSig(reqs[1], "acme")
	if got := e2eSignatures(t, reqs[1]); !slices.Equal(got, []string{sig0}) {
		t.Errorf("request 1 (key two) sent %q, want %q", got, sig0)
	}
	if got := e2eSignatures(t, reqs[2]); !slices.Equal(got, []string{sig0, sig1}) {
		t.Errorf("request 2 sent %q, want %q", got, []string{sig0, sig1})
	}
	if !bytes.Contains(reqs[2].Body, []byte(`"data":"REDACTED-OPAQUE-DATA"`)) {
		t.Errorf("the redacted thinking was not sent back: %s", reqs[2].Body)
	}
	for _, r := range reqs {
		if !e2eThinks(&r) || !bytes.Contains(r.Body, []byte(`"max_tokens":8192`)) {
			t.Errorf("request %d: %s", r.Index, r.Body)
		}
	}
	var thought string
	for _, u := range framesOf(frames, "message_update") {
		if s, ok := u["thinkingDelta"].(string); ok {
			thought += s
		}
	}
	if !strings.Contains(thought, "Request 0 thinks about the weather.") {
		t.Errorf("thinking deltas = %q", thought)
	}
	msgs := getJSON(t, ts.baseURL+"/v1/sessions/"+id+"/messages")
	if !strings.Contains(msgs, `"text":"Request 0 thinks about the weather."`) || !strings.Contains(msgs, `"type":"redacted_thinking"`) {
		t.Errorf("messages lack the thinking: %s", msgs)
	}
	// The events again, from the start (the replay: up to the prompt_end).
	req, _ := http.NewRequestWithContext(testkit.Context(t), http.MethodGet, ts.baseURL+"/v1/sessions/"+id+"/events?afterSeq=0", nil)
	req.Header.Set("Accept", "text/event-stream")
	eresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var replay bytes.Buffer
	readSSE(t, io.TeeReader(eresp.Body, &replay), func(f sseFrame) bool { return f.event == "prompt_end" })
	eresp.Body.Close()
	events := replay.String()
	session := getJSON(t, ts.baseURL+"/v1/sessions/"+id)
	for what, s := range map[string]string{"the SSE stream": raw, "ListMessages": msgs, "the events": events, "GetSession": session} {
		for _, secret := range []string{sig0, sig1, "REDACTED-OPAQUE-DATA", "signature", "encryptedContent", "origin"} {
			if strings.Contains(s, secret) {
				t.Errorf("%s shows %q", what, secret)
			}
		}
	}
}

// A rotation to another account mid-loop: the other account's call gets
// nothing foreign (no signature, no thinking while the loop's last turn
// has none of its own) and is accepted.
func TestRotationToAnotherAccountOverREST(t *testing.T) {
	fake := providertest.NewServer(providertest.Options{
		Accounts: map[string]string{e2eKeyOne: "alpha", e2eKeyTwo: "beta"},
		Script:   e2eToolRounds(2),
	})
	defer fake.Close()
	ts := start(t, reasoningConfig(fake, "alpha", "beta"))
	id := createREST(t, testkit.Context(t), ts.baseURL, thinkingSession, nil)
	frames, _ := ssePrompt(t, ts, id, `{"text":"weather in Paris?"}`)
	if outcome(frames) != "completed" {
		t.Fatalf("outcome = %s", outcome(frames))
	}
	reqs := fake.Requests()
	if len(reqs) != 3 || reqs[1].Header.Get("x-api-key") != e2eKeyTwo {
		t.Fatalf("%d requests", len(reqs))
	}
	e2eAccepted(t, reqs)
	if bytes.Contains(reqs[1].Body, []byte("signature")) || e2eThinks(&reqs[1]) {
		t.Errorf("the call of account beta: %s", reqs[1].Body)
	}
	if got, want := e2eSignatures(t, reqs[2]), []string{e2eSig(reqs[0], "alpha")}; !slices.Equal(got, want) {
		t.Errorf("back on alpha: sent %q, want its own %q", got, want)
	}
}

// A fallback Anthropic → OpenAI mid-loop, then the revert after the
// primary's cooldown: OpenAI gets no Anthropic signature, Anthropic gets
// its own earlier reasoning again; every call is accepted.
func TestFallbackAndRevertWithThinkingOverREST(t *testing.T) {
	script := e2eToolRounds(2)
	fake := providertest.NewServer(providertest.Options{
		Accounts: map[string]string{e2eKeyOne: "acme", e2eKeyTwo: "acme", e2eKeyOAI: "org-x"},
		Script: func(r *providertest.Request) providertest.Step {
			if r.Index == 1 {
				return providertest.HTTPError(529)
			}
			return script(r)
		},
	})
	defer fake.Close()
	clock := testkit.NewClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	ts := start(t, reasoningConfig(fake, "acme", "acme"), app.WithClock(clock.Now))
	id := createREST(t, testkit.Context(t), ts.baseURL, thinkingSession, nil)
	frames, _ := ssePrompt(t, ts, id, `{"text":"weather in Paris?"}`)
	if outcome(frames) != "completed" {
		t.Fatalf("outcome = %s", outcome(frames))
	}
	if fa := framesOf(frames, "retry_fallback_applied"); len(fa) != 1 || fa[0]["to"] != "oai/gpt-5" {
		t.Fatalf("retry_fallback_applied = %v", fa)
	}
	reqs := fake.Requests()
	if len(reqs) != 4 || reqs[2].Kind != "openai-responses" || reqs[3].Kind != "openai-responses" {
		t.Fatalf("%d requests", len(reqs))
	}
	e2eAccepted(t, reqs, 1)
	sig0 := e2eSig(reqs[0], "acme")
	for _, r := range reqs[2:] {
		if bytes.Contains(r.Body, []byte(sig0)) || bytes.Contains(r.Body, []byte("signature")) {
			t.Errorf("OpenAI request %d holds the Anthropic signature: %s", r.Index, r.Body)
		}
	}
	if !bytes.Contains(reqs[3].Body, []byte(`"type":"reasoning"`)) || !bytes.Contains(reqs[3].Body, []byte(`gAAAAAB`)) {
		t.Errorf("OpenAI's own reasoning was not sent back to it: %s", reqs[3].Body)
	}

	clock.Advance(time.Hour)
	frames, _ = ssePrompt(t, ts, id, `{"text":"and tomorrow?"}`)
	if outcome(frames) != "completed" {
		t.Fatalf("outcome = %s", outcome(frames))
	}
	if mc := framesOf(frames, "model_change"); len(mc) != 1 || mc[0]["reason"] != "revert" {
		t.Fatalf("model_change = %v", mc)
	}
	reqs = fake.Requests()
	r := reqs[len(reqs)-1]
	e2eAccepted(t, reqs, 1)
	if r.Kind != "anthropic" || !e2eThinks(&r) {
		t.Fatalf("the reverted call: %s %s", r.Kind, r.Body)
	}
	if got := e2eSignatures(t, r); !slices.Equal(got, []string{sig0}) {
		t.Errorf("the reverted call sent %q, want the primary's own %q", got, sig0)
	}
	if bytes.Contains(r.Body, []byte("gAAAAAB")) {
		t.Errorf("the reverted call holds OpenAI's encrypted reasoning")
	}
}

// The configuration says keys one and two share account acme; the
// provider disagrees and refuses the signature: one strip-and-retry at
// delay 0 with errorClass stale_reasoning, outside max_retries (0), then
// success.
func TestRefusedSignatureOverREST(t *testing.T) {
	fake := providertest.NewServer(providertest.Options{
		Accounts: map[string]string{e2eKeyOne: "acme", e2eKeyTwo: "elsewhere"},
		Script:   e2eToolRounds(1),
	})
	defer fake.Close()
	ts := start(t, reasoningConfig(fake, "acme", "acme"))
	body := strings.Replace(thinkingSession, `"params"`, `"retry":{"maxRetries":0},"params"`, 1)
	id := createREST(t, testkit.Context(t), ts.baseURL, body, nil)
	frames, _ := ssePrompt(t, ts, id, `{"text":"weather in Paris?"}`)
	if outcome(frames) != "completed" {
		t.Fatalf("outcome = %s", outcome(frames))
	}
	reqs := fake.Requests()
	if len(reqs) != 3 || reqs[1].Step.Status != 400 {
		t.Fatalf("%d requests", len(reqs))
	}
	e2eAccepted(t, reqs, 1)
	st := framesOf(frames, "auto_retry_start")
	if len(st) != 1 || st[0]["errorClass"] != "stale_reasoning" || st[0]["delayMs"] != "0" || st[0]["attempt"] != float64(1) {
		t.Fatalf("auto_retry_start = %v", st)
	}
	if end := framesOf(frames, "auto_retry_end"); len(end) != 1 || end[0]["success"] != true {
		t.Fatalf("auto_retry_end = %v", end)
	}
	if bytes.Contains(reqs[2].Body, []byte("signature")) {
		t.Errorf("the retry sent reasoning state: %s", reqs[2].Body)
	}
}

// Bad model parameters over gRPC and REST: INVALID_ARGUMENT naming the
// field, nothing created or changed. GetSession shows the session's
// params; a prompt's own apply to that prompt only.
func TestModelParamsOverGRPCAndREST(t *testing.T) {
	fake := providertest.NewServer(providertest.Options{})
	defer fake.Close()
	ts := start(t, reasoningConfig(fake, "acme", "acme"))
	ctx := testkit.Context(t)
	f := func(v float64) *float64 { return &v }
	i := func(v int32) *int32 { return &v }
	budget := func(n int32) *agentdv1.ThinkingParams {
		return &agentdv1.ThinkingParams{Level: &agentdv1.ThinkingParams_BudgetTokens{BudgetTokens: n}}
	}
	effort := func(e string) *agentdv1.ThinkingParams {
		return &agentdv1.ThinkingParams{Level: &agentdv1.ThinkingParams_Effort{Effort: e}}
	}
	for _, tc := range []struct {
		model string
		p     *agentdv1.ModelParams
		field string
	}{
		{"anth/" + e2eModel, &agentdv1.ModelParams{MaxTokens: i(100000)}, "params.max_tokens"},
		{"anth/" + e2eModel, &agentdv1.ModelParams{MaxTokens: i(0)}, "params.max_tokens"},
		{"anth/" + e2eModel, &agentdv1.ModelParams{Temperature: f(0.5), Thinking: effort("low")}, "params.temperature"},
		{"anth/" + e2eModel, &agentdv1.ModelParams{Thinking: budget(512)}, "params.thinking.budget_tokens"},
		{"anth/" + e2eModel, &agentdv1.ModelParams{MaxTokens: i(2000), Thinking: budget(4096)}, "params.thinking.budget_tokens"},
		{"anth/claude-3-haiku", &agentdv1.ModelParams{Thinking: effort("low")}, "params.thinking"},
		{"anth/" + e2eModel, &agentdv1.ModelParams{Thinking: effort("extreme")}, "params.thinking.effort"},
		{"anth/" + e2eModel, &agentdv1.ModelParams{TopP: f(1.5)}, "params.top_p"},
		{"oai/gpt-5", &agentdv1.ModelParams{StopSequences: []string{"END"}}, "params.stop_sequences"},
		{"oai/gpt-5", &agentdv1.ModelParams{Thinking: budget(2048)}, "params.thinking.budget_tokens"},
		{"sim/echo", &agentdv1.ModelParams{Temperature: f(3)}, "params.temperature"},
	} {
		_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: tc.model, Params: tc.p})
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.field+":") {
			t.Errorf("CreateSession(%s, %v) = %v; want INVALID_ARGUMENT on %s", tc.model, tc.p, err, tc.field)
		}
	}
	for _, tc := range []struct{ body, field string }{
		{`{"model":"anth/claude-sonnet-4-5","params":{"maxTokens":100000}}`, "params.max_tokens"},
		{`{"model":"anth/claude-sonnet-4-5","params":{"thinking":{"effort":"extreme"}}}`, "params.thinking.effort"},
		{`{"model":"anth/claude-sonnet-4-5","params":{"thinking":{"budgetTokens":2048,"effort":"low"}}}`, "effort"},
		{`{"model":"oai/gpt-5","params":{"stopSequences":["END"]}}`, "params.stop_sequences"},
		{`{"model":"anth/claude-sonnet-4-5","params":{"temperatur":1}}`, "temperatur"},
	} {
		resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions", tc.body, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Code    codes.Code `json:"code"`
			Message string     `json:"message"`
		}
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != 400 || e.Code != codes.InvalidArgument || !strings.Contains(e.Message, tc.field) {
			t.Errorf("POST /v1/sessions %s = %d %s; want 400 INVALID_ARGUMENT naming %s", tc.body, resp.StatusCode, b, tc.field)
		}
	}
	if list := must(ts.agent.ListSessions(ctx, &agentdv1.ListSessionsRequest{})); len(list.GetSessions()) != 0 {
		t.Fatalf("refused creations left %d sessions", len(list.GetSessions()))
	}

	// The session's params, as GetSession (REST) shows them.
	id := createREST(t, ctx, ts.baseURL, `{"model":"anth/claude-sonnet-4-5","params":{"maxTokens":4096,"temperature":1,"stopSequences":["END"],"thinking":{"budgetTokens":2048}}}`, nil)
	var got struct {
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal([]byte(getJSON(t, ts.baseURL+"/v1/sessions/"+id)), &got); err != nil {
		t.Fatal(err)
	}
	if want := `{"maxTokens":4096,"temperature":1,"stopSequences":["END"],"thinking":{"budgetTokens":2048}}`; compactJSON(t, got.Params) != want {
		t.Errorf("GetSession params = %s, want %s", got.Params, want)
	}
	if p := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id})).GetParams(); p.GetMaxTokens() != 4096 || p.GetThinking().GetBudgetTokens() != 2048 {
		t.Errorf("GetSession (gRPC) params = %v", p)
	}

	// A refused prompt (gRPC, then REST) changes nothing and calls nobody.
	before := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id}))
	stream, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Text: "x", Params: &agentdv1.ModelParams{TopP: f(3)}})
	if err == nil {
		_, err = stream.Recv()
	}
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "params.top_p:") {
		t.Fatalf("Prompt(top_p 3) = %v", err)
	}
	resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"x","params":{"maxTokens":100000}}`, http.Header{"Accept": {"text/event-stream"}})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "params.max_tokens") {
		t.Fatalf("REST prompt (max_tokens 100000) = %d %s", resp.StatusCode, b)
	}
	after := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id}))
	if after.GetMessageCount() != before.GetMessageCount() || after.GetLastSeq() != before.GetLastSeq() || len(fake.Requests()) != 0 {
		t.Fatalf("refused prompts changed the session (%v → %v) or called the provider (%d)", before, after, len(fake.Requests()))
	}

	// A prompt's own params apply to it only.
	frames, _ := ssePrompt(t, ts, id, `{"text":"short","params":{"maxTokens":3000,"stopSequences":["STOP"]}}`)
	if outcome(frames) != "completed" {
		t.Fatalf("outcome = %s", outcome(frames))
	}
	frames, _ = ssePrompt(t, ts, id, `{"text":"default"}`)
	if outcome(frames) != "completed" {
		t.Fatalf("outcome = %s", outcome(frames))
	}
	reqs := fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, want := range []string{`"max_tokens":3000,`, `"max_tokens":4096,`} {
		if !bytes.Contains(reqs[i].Body, []byte(want)) || !bytes.Contains(reqs[i].Body, []byte(`"budget_tokens":2048`)) {
			t.Errorf("request %d: want %s and the session's thinking: %s", i, want, reqs[i].Body)
		}
	}
	if !bytes.Contains(reqs[0].Body, []byte(`"stop_sequences":["STOP"]`)) || !bytes.Contains(reqs[1].Body, []byte(`"stop_sequences":["END"]`)) {
		t.Errorf("stop sequences: %s / %s", reqs[0].Body, reqs[1].Body)
	}
	if p := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id})).GetParams(); p.GetMaxTokens() != 4096 {
		t.Errorf("a prompt's params changed the session's: %v", p)
	}
}

func compactJSON(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A credential's account over REST: given at creation, listed; a
// credential without one lists its id.
func TestCredentialAccountOverREST(t *testing.T) {
	fake := providertest.NewServer(providertest.Options{})
	defer fake.Close()
	ts := start(t, reasoningConfig(fake, "acme", "acme"))
	ctx := testkit.Context(t)
	for _, tc := range []struct{ body string }{
		{`{"provider":"anth","id":"three","secret":"sk-three","account":"org-3"}`},
		{`{"provider":"anth","id":"four","secret":"sk-four"}`},
	} {
		resp := postJSON(t, ctx, ts.baseURL+"/v1/credentials", tc.body, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Contains(string(b), "sk-") {
			t.Fatalf("POST /v1/credentials = %d %s", resp.StatusCode, b)
		}
	}
	resp := postJSON(t, ctx, ts.baseURL+"/v1/credentials", `{"provider":"anth","id":"five","secret":"sk-five","account":"has space"}`, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "account") {
		t.Fatalf("a bad account = %d %s", resp.StatusCode, b)
	}
	var list struct {
		Credentials []struct{ ID, Account string } `json:"credentials"`
	}
	if err := json.Unmarshal([]byte(getJSON(t, ts.baseURL+"/v1/credentials?provider=anth")), &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range list.Credentials {
		got = append(got, c.ID+"="+c.Account)
	}
	if want := []string{"one=acme", "two=acme", "three=org-3", "four=four"}; !slices.Equal(got, want) {
		t.Fatalf("ListCredentials = %q, want %q", got, want)
	}
}
