package openai

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/testkit"
)

// classify is the retry engine's verdict on a failed result.
func classify(api string, res provider.Result) retry.Verdict {
	f := retry.Failure{
		StopReason: res.Message.StopReason, ErrorMessage: res.Message.ErrorMessage, StopDetails: res.Message.StopDetails,
		API: api, ObservableOutput: res.Message.HasObservableOutput(),
	}
	if rf := res.Failure; rf != nil {
		f.Status, f.Headers, f.ErrorType, f.ErrorCode = rf.Status, rf.Headers, rf.Type, rf.Code
	}
	return retry.Classify(f, time.Now())
}

// rawInput returns the raw "input" items of the i-th recorded request.
func rawInput(t *testing.T, s *providertest.Server, i int) []json.RawMessage {
	t.Helper()
	reqs, err := s.WaitRequests(testkit.Context(t), i+1)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Input []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(reqs[i].Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Input
}

func bodyAt(t *testing.T, s *providertest.Server, i int) map[string]any {
	t.Helper()
	reqs, err := s.WaitRequests(testkit.Context(t), i+1)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := reqs[i].JSON(&body); err != nil {
		t.Fatal(err)
	}
	return body
}

func next(res provider.Result, prompt string, history ...provider.Message) []provider.Message {
	return append(append(append([]provider.Message{}, history...), res.Message), userMsg(prompt))
}

// With EncryptedReasoning, every call asks for encrypted reasoning without
// server-side state; a reasoning item comes back with its id, summary and
// encrypted content, and goes back as a reasoning input item, byte for
// byte, before the message it preceded.
func TestEncryptedReasoningRoundTrip(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{
		Thinking: []string{"Compare ", "<both> & pick."}, Text: []string{"B."},
		Tools: []providertest.ToolCall{{ID: "call_1", Name: "get", Args: []string{`{}`}}},
	}})
	c := newClient(t, Options{BaseURL: s.URL, EncryptedReasoning: true, ChainResponses: true})
	if c.chain != nil {
		t.Errorf("ChainResponses stayed on beside EncryptedReasoning")
	}
	res, rec := streamT(t, c, request())
	m := res.Message
	enc := providertest.OpenAIEncryptedContent(providertest.DefaultAccount, "rs_test0000")
	if m.StopReason != provider.StopToolUse || len(m.Content) != 3 || rec.Thinking() != "Compare <both> & pick." {
		t.Fatalf("result %+v", res)
	}
	if b := m.Content[0]; b.Type != provider.BlockThinking || b.ReasoningID != "rs_test0000" || b.EncryptedContent != enc ||
		strings.Join(b.Summary, "|") != "Compare <both> & pick." || b.Text != "Compare <both> & pick." {
		t.Errorf("reasoning block %+v", b)
	}
	if b := bodyAt(t, s, 0); b["store"] != false || strings.Join(anyStrings(b["include"]), ",") != "reasoning.encrypted_content" ||
		b["previous_response_id"] != nil {
		t.Errorf("first body %v", b)
	}

	history := append([]provider.Message{userMsg("hi")}, m,
		provider.Message{Role: provider.RoleTool, Content: []provider.Block{{Type: provider.BlockToolResult, ToolCallID: "call_1", Text: "7"}}})
	res2, _ := streamT(t, c, request(history...))
	if res2.Message.StopReason != provider.StopToolUse {
		t.Fatalf("second call: %+v", res2)
	}
	in := rawInput(t, s, 1)
	want := []string{
		`{"type":"message","role":"user","content":"hi"}`,
		`{"type":"reasoning","id":"rs_test0000","summary":[{"type":"summary_text","text":"Compare \u003cboth\u003e \u0026 pick."}],"encrypted_content":"` + enc + `"}`,
		`{"type":"message","role":"assistant","content":"B."}`,
		`{"type":"function_call","call_id":"call_1","name":"get","arguments":"{}"}`,
		`{"type":"function_call_output","call_id":"call_1","output":"7"}`,
	}
	if len(in) != len(want) {
		t.Fatalf("input %s", in)
	}
	for i := range want {
		if string(in[i]) != want[i] {
			t.Errorf("input[%d] = %s\nwant %s", i, in[i], want[i])
		}
	}
	// The second answer's reasoning item is its own (request 1's).
	if b := res2.Message.Content[0]; b.ReasoningID != "rs_test0001" || b.EncryptedContent != providertest.OpenAIEncryptedContent(providertest.DefaultAccount, "rs_test0001") {
		t.Errorf("second reasoning block %+v", b)
	}
}

func anyStrings(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

// A reasoning item with an empty summary (no reasoning summary streamed)
// is kept and goes back with "summary": [].
func TestReasoningItemWithoutSummary(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{EmptyThinking: true, Text: []string{"Ok."}}})
	c := newClient(t, Options{BaseURL: s.URL, EncryptedReasoning: true})
	res, rec := streamT(t, c, request())
	m := res.Message
	if len(m.Content) != 2 || m.Content[0].Text != "" || m.Content[0].ReasoningID != "rs_test0000" || m.Content[0].EncryptedContent == "" ||
		rec.Thinking() != "" {
		t.Fatalf("content %+v", m.Content)
	}
	if res2, _ := streamT(t, c, request(next(res, "more", userMsg("hi"))...)); res2.Message.StopReason != provider.StopEnd {
		t.Fatalf("second call %+v", res2)
	}
	want := `{"type":"reasoning","id":"rs_test0000","summary":[],"encrypted_content":"` + m.Content[0].EncryptedContent + `"}`
	if got := string(rawInput(t, s, 1)[1]); got != want {
		t.Errorf("reasoning item %s\nwant %s", got, want)
	}
}

// The fake binds encrypted content to the organisation of the key: another
// organisation's, or altered, content is refused with OpenAI's 400
// invalid_encrypted_content, which classifies as stale reasoning.
func TestForeignEncryptedContentIsRefused(t *testing.T) {
	const other = "sk-proj-OTHERKEYq9Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf"
	s := newServer(t, providertest.Options{
		Answer:   &providertest.Answer{Thinking: []string{"Hmm."}, Text: []string{"Yes."}},
		Accounts: map[string]string{secret: "org-a", other: "org-b"},
	})
	c := newClient(t, Options{BaseURL: s.URL, EncryptedReasoning: true})
	res, _ := streamT(t, c, request())
	if enc := res.Message.Content[0].EncryptedContent; enc != providertest.OpenAIEncryptedContent("org-a", "rs_test0000") {
		t.Fatalf("encrypted content %q is not org-a's", enc)
	}
	altered := res
	altered.Message.Content = append([]provider.Block{}, res.Message.Content...)
	enc := altered.Message.Content[0].EncryptedContent
	altered.Message.Content[0].EncryptedContent = enc[:len(enc)-4] + "AAA="

	for _, tc := range []struct {
		name, secret string
		res          provider.Result
		msg          string
	}{
		{"other organisation", other, res, "400 invalid_request_error: The encrypted content for item rs_test0000 could not be verified." +
			" Reason: Encrypted content organization_id did not match the target organization."},
		{"altered", secret, altered, "400 invalid_request_error: The encrypted content for item rs_test0000 could not be verified."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := request(next(tc.res, "again", userMsg("hi"))...)
			req.Credential.Secret = tc.secret
			r := c.Stream(testkit.Context(t), req, nil)
			providertest.CheckNoSecret(t, r, tc.secret)
			if m, f := r.Message, r.Failure; m.StopReason != provider.StopError || m.ErrorMessage != tc.msg || f == nil || f.Status != 400 ||
				f.Code != "invalid_encrypted_content" || f.Type != "invalid_request_error" || r.ResetState {
				t.Fatalf("result %+v", r)
			}
			v := classify(provider.KindOpenAIResponses, r)
			if v.Class != retry.ClassStaleReplay || v.Stale != retry.StaleReasoningEncrypted || v.EventClass() != retry.ErrorClassStaleReasoning {
				t.Errorf("verdict %+v", v)
			}
			// Stripped of its reasoning state, the history goes through.
			req.Messages = provider.StripReasoning(req.Messages)
			if r := c.Stream(testkit.Context(t), req, nil); r.Message.StopReason != provider.StopEnd {
				t.Errorf("retry without reasoning state: %+v", r)
			}
		})
	}
}

// Without EncryptedReasoning a reasoning item has no encrypted content
// (store: false keeps nothing on the server): it is kept for display and
// never sent back, since its id alone would name state that is gone.
func TestReasoningWithoutEncryptedContentIsNotReplayed(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{Thinking: []string{"Hmm."}, Text: []string{"Yes."}}})
	c := newClient(t, Options{BaseURL: s.URL})
	res, _ := streamT(t, c, request())
	if b := res.Message.Content[0]; b.ReasoningID != "rs_test0000" || b.EncryptedContent != "" {
		t.Fatalf("reasoning block %+v", b)
	}
	if b := bodyAt(t, s, 0); b["include"] != nil || b["store"] != false {
		t.Errorf("body %v", b)
	}
	if r, _ := streamT(t, c, request(next(res, "more", userMsg("hi"))...)); r.Message.StopReason != provider.StopEnd {
		t.Fatalf("second call %+v", r)
	}
	for _, it := range rawInput(t, s, 1) {
		if strings.Contains(string(it), `"reasoning"`) {
			t.Errorf("a reasoning item was sent: %s", it)
		}
	}
}

// Several summary parts stream as one thinking block, parts separated by a
// blank line, and go back as they came.
func TestReasoningSummaryParts(t *testing.T) {
	ev := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	stream := ev("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress"}}`) +
		ev("response.output_item.added", `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`) +
		ev("response.reasoning_summary_part.added", `{"type":"response.reasoning_summary_part.added","sequence_number":2,"item_id":"rs_1","output_index":0,"summary_index":0}`) +
		ev("response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Plan**"}`) +
		ev("response.reasoning_summary_part.added", `{"type":"response.reasoning_summary_part.added","sequence_number":4,"item_id":"rs_1","output_index":0,"summary_index":1}`) +
		ev("response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":5,"item_id":"rs_1","output_index":0,"summary_index":1,"delta":"Then act."}`) +
		ev("response.output_item.done", `{"type":"response.output_item.done","sequence_number":6,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"**Plan**"},{"type":"summary_text","text":"Then act."}],"encrypted_content":"gAAAAABenc=="}}`) +
		ev("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Done"}`) +
		ev("response.completed", `{"type":"response.completed","sequence_number":8,"response":{"id":"resp_1","status":"completed"}}`)
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepHTTPError, Status: 200, ContentType: "text/event-stream", Body: stream})
	res, rec := streamT(t, newClient(t, Options{BaseURL: s.URL, EncryptedReasoning: true}), request())
	b := res.Message.Content[0]
	if res.Message.StopReason != provider.StopEnd || b.Text != "**Plan**\n\nThen act." || rec.Thinking() != b.Text ||
		strings.Join(b.Summary, "|") != "**Plan**|Then act." || b.EncryptedContent != "gAAAAABenc==" || b.ReasoningID != "rs_1" {
		t.Fatalf("result %+v", res)
	}
	got, _ := json.Marshal(items(res.Message))
	want := `[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"**Plan**"},{"type":"summary_text","text":"Then act."}],"encrypted_content":"gAAAAABenc=="},` +
		`{"type":"message","role":"assistant","content":"Done"}]`
	if string(got) != want {
		t.Errorf("items %s\nwant %s", got, want)
	}
}

// A reasoning item that nothing follows is not sent (the API refuses a
// reasoning item without its following item); blocks keep their order.
func TestAssistantItemsOrder(t *testing.T) {
	rs := func(id string) provider.Block {
		return provider.Block{Type: provider.BlockThinking, ReasoningID: id, EncryptedContent: "gAAAAAB" + id}
	}
	m := provider.Message{Role: provider.RoleAssistant, Content: []provider.Block{
		rs("rs_1"), {Type: provider.BlockToolCall, ToolCallID: "c1", ToolName: "a"},
		rs("rs_2"), {Type: provider.BlockText, Text: "x"}, {Type: provider.BlockThinking, Text: "display only"}, {Type: provider.BlockText, Text: "y"},
		rs("rs_3"),
	}}
	var types []string
	for _, it := range items(m) {
		types = append(types, it.Type+":"+it.ID+it.CallID+it.Content)
	}
	if got := strings.Join(types, " "); got != "reasoning:rs_1 function_call:c1 reasoning:rs_2 message:xy" {
		t.Errorf("items %s", got)
	}
}

// Params map onto each API's fields.
func TestParamsMapping(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		api    string
		params provider.Params
		want   map[string]string // field → its JSON
		absent []string
	}{
		{APIResponses, provider.Params{}, nil, []string{"max_output_tokens", "temperature", "top_p", "reasoning", "include", "stop"}},
		{APIResponses, provider.Params{MaxTokens: 500, Temperature: f(0.7), TopP: f(0.5), Thinking: &provider.Thinking{Effort: provider.EffortHigh}},
			map[string]string{"max_output_tokens": "500", "temperature": "0.7", "top_p": "0.5", "reasoning": `{"effort":"high","summary":"auto"}`},
			[]string{"max_tokens", "stop"}},
		{APIResponses, provider.Params{Thinking: &provider.Thinking{}}, map[string]string{"reasoning": `{"effort":"medium","summary":"auto"}`}, nil},
		{APIChat, provider.Params{}, nil, []string{"max_completion_tokens", "temperature", "top_p", "stop", "reasoning_effort"}},
		{APIChat, provider.Params{MaxTokens: 300, Temperature: f(1.5), TopP: f(1), StopSequences: []string{"END"}, Thinking: &provider.Thinking{Effort: provider.EffortLow}},
			map[string]string{"max_completion_tokens": "300", "temperature": "1.5", "top_p": "1", "stop": `["END"]`, "reasoning_effort": `"low"`},
			[]string{"max_tokens", "reasoning"}},
	} {
		t.Run(tc.api, func(t *testing.T) {
			kind := map[string]string{APIResponses: provider.KindOpenAIResponses, APIChat: provider.KindOpenAIChat}[tc.api]
			if err := provider.ValidateParams(kind, tc.params); err != nil {
				t.Fatalf("ValidateParams: %v", err)
			}
			s := newServer(t, providertest.Options{})
			req := request()
			req.Params = tc.params
			if res, _ := streamT(t, newClient(t, Options{API: tc.api, BaseURL: s.URL}), req); res.Message.StopReason != provider.StopEnd {
				t.Fatalf("result %+v", res)
			}
			reqs, err := s.WaitRequests(testkit.Context(t), 1)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]json.RawMessage
			if err := reqs[0].JSON(&body); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if string(body[k]) != v {
					t.Errorf("%s = %s, want %s", k, body[k], v)
				}
			}
			for _, k := range tc.absent {
				if v, ok := body[k]; ok {
					t.Errorf("%s = %s, want it absent", k, v)
				}
			}
		})
	}
}

// A failed call's reasoning item is display only.
func TestFailedReasoningIsNotReplayed(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{Thinking: []string{"Hm", "m."}, Text: []string{"Hel", "lo"}}})
	// Body events: item added, part added, 2 deltas, text done, part done,
	// item done (with encrypted content), then the message: item added,
	// part added, the first text delta.
	s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, After: 10})
	c := newClient(t, Options{BaseURL: s.URL, EncryptedReasoning: true})
	res, _ := streamT(t, c, request())
	m := res.Message
	if m.StopReason != provider.StopError || len(m.Content) == 0 || m.Content[0].Text != "Hmm." || m.HasReasoningState() {
		t.Fatalf("result %+v", res)
	}
	if got := items(m); len(got) != 1 || got[0].Type != "message" {
		t.Errorf("items %+v", got)
	}
}
