package anthropic

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/testkit"
)

const model = "claude-sonnet-4-5"

// classify is the retry engine's verdict on a failed result.
func classify(res provider.Result) retry.Verdict {
	f := retry.Failure{
		StopReason: res.Message.StopReason, ErrorMessage: res.Message.ErrorMessage, StopDetails: res.Message.StopDetails,
		API: provider.KindAnthropic, ObservableOutput: res.Message.HasObservableOutput(),
	}
	if rf := res.Failure; rf != nil {
		f.Status, f.Headers, f.ErrorType, f.ErrorCode = rf.Status, rf.Headers, rf.Type, rf.Code
	}
	return retry.Classify(f, time.Now())
}

// sentMessages returns the raw "messages" of the i-th recorded request.
func sentMessages(t *testing.T, s *providertest.Server, i int) []json.RawMessage {
	t.Helper()
	reqs, err := s.WaitRequests(testkit.Context(t), i+1)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(reqs[i].Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.Messages
}

// followUp is the history after res: the first request's prompt, the
// answer and a new prompt.
func followUp(first *provider.Request, res provider.Result, prompt string) *provider.Request {
	req := *first
	req.Messages = append(append([]provider.Message{}, first.Messages...), res.Message,
		provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: prompt}}})
	return &req
}

func thinkingRequest(effort string) *provider.Request {
	req := request()
	req.Params.Thinking = &provider.Thinking{Effort: effort}
	return req
}

// A thinking block comes back with its signature and goes back, thinking
// text and signature byte for byte, in its place; the fake verifies it.
func TestThinkingSignatureRoundTrip(t *testing.T) {
	thinking := []string{"Weigh <a> & \"b\" ", "— then \u2028answer."}
	full := strings.Join(thinking, "")
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{Thinking: thinking, Text: []string{"Done."}}})
	c := newClient(t, Options{BaseURL: s.URL})

	first := thinkingRequest(provider.EffortLow)
	res, rec := streamT(t, c, first)
	m := res.Message
	sig := providertest.AnthropicSignature(providertest.DefaultAccount, model, full)
	if m.StopReason != provider.StopEnd || len(m.Content) != 2 || rec.Thinking() != full {
		t.Fatalf("result %+v, deltas %+v", res, rec.All)
	}
	if b := m.Content[0]; b.Type != provider.BlockThinking || b.Text != full || b.Signature != sig || !b.Origin.IsZero() {
		t.Errorf("thinking block = %+v, want signature %q", b, sig)
	}

	res2, _ := streamT(t, c, followUp(first, res, "and?"))
	if res2.Message.StopReason != provider.StopEnd {
		t.Fatalf("second call: %+v", res2)
	}
	msgs := sentMessages(t, s, 1)
	var got []map[string]any
	if err := json.Unmarshal(msgs[1], &struct {
		Content *[]map[string]any `json:"content"`
	}{&got}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0]["type"] != "thinking" || got[0]["thinking"] != full || got[0]["signature"] != sig ||
		got[1]["type"] != "text" || got[1]["text"] != "Done." || len(got[0]) != 3 {
		t.Errorf("assistant turn sent back = %s", msgs[1])
	}
}

// A thinking block without text (only its signature_delta) is kept, and
// sent back with its empty thinking.
func TestSignatureOnlyBlock(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{EmptyThinking: true, Text: []string{"Short."}}})
	c := newClient(t, Options{BaseURL: s.URL})
	first := thinkingRequest("")
	res, rec := streamT(t, c, first)
	m := res.Message
	sig := providertest.AnthropicSignature(providertest.DefaultAccount, model, "")
	if len(m.Content) != 2 || m.Content[0].Type != provider.BlockThinking || m.Content[0].Text != "" || m.Content[0].Signature != sig ||
		rec.Thinking() != "" || !m.HasReasoningState() {
		t.Fatalf("content = %+v", m.Content)
	}
	if res2, _ := streamT(t, c, followUp(first, res, "more")); res2.Message.StopReason != provider.StopEnd {
		t.Fatalf("second call: %+v", res2)
	}
	want := `{"role":"assistant","content":[{"type":"thinking","thinking":"","signature":"` + sig + `"},{"type":"text","text":"Short."}]}`
	if got := string(sentMessages(t, s, 1)[1]); got != want {
		t.Errorf("sent back\n%s\nwant\n%s", got, want)
	}
}

// redacted_thinking blocks keep their opaque data, and go back before the
// thinking and text, as they came.
func TestRedactedThinkingRoundTrip(t *testing.T) {
	data := []string{"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP", "EmwKAhgBEgyRedacted2+/="}
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{Redacted: data, Thinking: []string{"ok"}, Text: []string{"Fine."}}})
	c := newClient(t, Options{BaseURL: s.URL})
	first := thinkingRequest(provider.EffortHigh)
	res, rec := streamT(t, c, first)
	m := res.Message
	if len(m.Content) != 4 || m.Content[0].Type != provider.BlockRedactedThinking || m.Content[0].Data != data[0] || m.Content[0].Text != "" ||
		m.Content[1].Data != data[1] || m.Content[2].Type != provider.BlockThinking || m.Content[2].Signature == "" || rec.Thinking() != "ok" {
		t.Fatalf("content = %+v", m.Content)
	}
	if res2, _ := streamT(t, c, followUp(first, res, "more")); res2.Message.StopReason != provider.StopEnd {
		t.Fatalf("second call: %+v", res2)
	}
	want := `{"role":"assistant","content":[{"type":"redacted_thinking","data":"` + data[0] + `"},{"type":"redacted_thinking","data":"` + data[1] +
		`"},{"type":"thinking","thinking":"ok","signature":"` + m.Content[2].Signature + `"},{"type":"text","text":"Fine."}]}`
	if got := string(sentMessages(t, s, 1)[1]); got != want {
		t.Errorf("sent back\n%s\nwant\n%s", got, want)
	}
}

// The fake binds signatures to account and model: a thinking block replayed
// to another model or account, or altered, is refused with Anthropic's 400,
// which the provider reports and retry classifies as stale reasoning. Keys
// of one account share its signatures.
func TestForeignSignaturesAreRefused(t *testing.T) {
	const other = "sk-ant-api03-OTHERKEYzq7Wx9Vb2Nm4Lk6Jh8Gf0Dd-9z8y7x6w5v4u"
	const sibling = "sk-ant-api03-SIBLINGKEYq7Wx9Vb2Nm4Lk6Jh8Gf0Dd-1q2w3e4r5t"
	s := newServer(t, providertest.Options{
		Answer:   &providertest.Answer{Thinking: []string{"Let me think."}, Text: []string{"Yes."}},
		Accounts: map[string]string{secret: "acct-a", sibling: "acct-a", other: "acct-b"},
	})
	c := newClient(t, Options{BaseURL: s.URL})
	first := thinkingRequest("")
	res, _ := streamT(t, c, first)
	if sig := res.Message.Content[0].Signature; sig != providertest.AnthropicSignature("acct-a", model, "Let me think.") {
		t.Fatalf("signature %q is not acct-a's", sig)
	}
	altered := followUp(first, res, "again")
	altered.Messages[1].Content = append([]provider.Block{}, res.Message.Content...)
	altered.Messages[1].Content[0].Text += " (edited)"
	forged := followUp(first, res, "again")
	forged.Messages[1].Content = append([]provider.Block{}, res.Message.Content...)
	forged.Messages[1].Content[0].Signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"

	for _, tc := range []struct {
		name   string
		req    *provider.Request
		secret string
		model  string
		ok     bool
	}{
		{"same account, other key", followUp(first, res, "again"), sibling, model, true},
		{"other account", followUp(first, res, "again"), other, model, false},
		{"other model", followUp(first, res, "again"), secret, "claude-opus-4-1", false},
		{"altered thinking", altered, secret, model, false},
		{"forged signature", forged, secret, model, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Credential.Secret, tc.req.Model = tc.secret, tc.model
			res := c.Stream(testkit.Context(t), tc.req, nil)
			providertest.CheckNoSecret(t, res, tc.secret)
			m := res.Message
			if tc.ok {
				if m.StopReason != provider.StopEnd {
					t.Fatalf("result %+v", res)
				}
				return
			}
			if m.StopReason != provider.StopError || m.ErrorMessage != "400 invalid_request_error: messages.1.content.0: Invalid `signature` in `thinking` block" ||
				res.Failure == nil || res.Failure.Status != 400 || res.Failure.Type != "invalid_request_error" || len(m.Content) != 0 {
				t.Fatalf("result %+v", res)
			}
			v := classify(res)
			if v.Class != retry.ClassStaleReplay || v.Stale != retry.StaleReasoningSignature || !v.Retryable || v.EventClass() != retry.ErrorClassStaleReasoning {
				t.Errorf("verdict %+v", v)
			}
			// What the session then does: strip the state the target did not
			// make (here, all of it) and retry.
			retried := *tc.req
			retried.Messages = provider.StripReasoning(tc.req.Messages)
			if res := c.Stream(testkit.Context(t), &retried, nil); res.Message.StopReason != provider.StopEnd {
				t.Errorf("retry without reasoning state: %+v", res)
			}
			if tc.req.Messages[1].Content[0].Signature == "" {
				t.Errorf("StripReasoning modified the history")
			}
		})
	}
}

// With thinking on, the final assistant message of an open tool loop must
// start with thinking: a turn made without (another kind's, or before
// thinking was on) is refused with Anthropic's wording, which classifies as
// stale reasoning; with thinking off it is accepted.
func TestThinkingFirstInToolLoop(t *testing.T) {
	s := newServer(t, providertest.Options{})
	c := newClient(t, Options{BaseURL: s.URL})
	req := thinkingRequest("")
	req.Messages = append(req.Messages,
		provider.Message{Role: provider.RoleAssistant, StopReason: provider.StopToolUse, Content: []provider.Block{
			{Type: provider.BlockThinking, Text: "unsigned, from another provider"},
			{Type: provider.BlockText, Text: "Let me look."},
			{Type: provider.BlockToolCall, ToolCallID: "toolu_1", ToolName: "get", ToolInput: json.RawMessage(`{}`)},
		}},
		provider.Message{Role: provider.RoleTool, Content: []provider.Block{{Type: provider.BlockToolResult, ToolCallID: "toolu_1", Text: "42"}}},
	)
	if !provider.OpenToolTurnLacksThinking(req.Messages) {
		t.Errorf("OpenToolTurnLacksThinking = false")
	}
	res, _ := streamT(t, c, req)
	want := "400 invalid_request_error: " + strings.ReplaceAll(providertest.AnthropicThinkingOrderFormat, "%d", "1")
	want = strings.Replace(want, "%s", "text", 1)
	if m := res.Message; m.StopReason != provider.StopError || m.ErrorMessage != want || res.Failure == nil || res.Failure.Status != 400 {
		t.Fatalf("result %+v\nwant message %q", res, want)
	}
	if v := classify(res); v.Class != retry.ClassStaleReplay || v.Stale != retry.StaleReasoningOrder || !v.StaleReasoning() {
		t.Errorf("verdict %+v", v)
	}

	off := *req
	off.Params.Thinking = nil
	if res, _ := streamT(t, c, &off); res.Message.StopReason != provider.StopEnd {
		t.Errorf("thinking off: %+v", res)
	}
}

// A failed or aborted call leaves no replayable reasoning: a thinking
// block cut before its signature, or even after it, keeps its text only,
// and is not sent back.
func TestPartialThinkingIsNeverReplayed(t *testing.T) {
	answer := &providertest.Answer{Thinking: []string{"Let me ", "check."}, Text: []string{"Hel", "lo"}}
	// Body frames: thinking start, ping, two thinking deltas, signature,
	// stop, then the text block.
	for _, tc := range []struct {
		name string
		step providertest.Step
	}{
		{"cut before the signature", providertest.Step{Kind: providertest.StepCut, After: 4}},
		{"error after the signed block", providertest.Step{Kind: providertest.StepErrorEvent, After: 6}},
		{"cut mid-text", providertest.Step{Kind: providertest.StepCut, After: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, providertest.Options{Answer: answer})
			s.Enqueue(tc.step)
			c := newClient(t, Options{BaseURL: s.URL})
			first := thinkingRequest("")
			res, rec := streamT(t, c, first)
			m := res.Message
			if m.StopReason != provider.StopError || m.StopDetails != provider.DetailInterruptedAfterContent || rec.Thinking() != "Let me check." {
				t.Fatalf("result %+v", res)
			}
			if len(m.Content) == 0 || m.Content[0].Type != provider.BlockThinking || m.Content[0].Text != "Let me check." || m.HasReasoningState() {
				t.Errorf("content %+v", m.Content)
			}
			if res2, _ := streamT(t, c, followUp(first, res, "again")); res2.Message.StopReason != provider.StopEnd {
				t.Fatalf("next call: %+v", res2)
			}
			for _, msg := range sentMessages(t, s, 1) {
				if strings.Contains(string(msg), `"thinking"`) {
					t.Errorf("the failed turn's thinking was sent back: %s", msg)
				}
			}
		})
	}
}

// Params map onto the Messages API's fields; thinking raises max_tokens
// when the budget would not fit.
func TestParamsMapping(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name      string
		params    provider.Params
		maxTokens int
		extra     string // the fields after "messages", before "stream"
	}{
		{"none", provider.Params{}, 8192, ""},
		{"sampling", provider.Params{MaxTokens: 2000, Temperature: f(0.25), TopP: f(0.9), StopSequences: []string{"END", "\n\nHuman:"}},
			2000, `,"temperature":0.25,"top_p":0.9,"stop_sequences":["END","\n\nHuman:"]`},
		{"effort low fits the default", provider.Params{Thinking: &provider.Thinking{Effort: provider.EffortLow}},
			8192, `,"thinking":{"type":"enabled","budget_tokens":1024}`},
		{"default effort is medium", provider.Params{Thinking: &provider.Thinking{}},
			8192, `,"thinking":{"type":"enabled","budget_tokens":4096}`},
		{"effort high raises max_tokens", provider.Params{Thinking: &provider.Thinking{Effort: provider.EffortHigh}},
			16384 + DefaultMaxTokens, `,"thinking":{"type":"enabled","budget_tokens":16384}`},
		{"budget with max_tokens", provider.Params{MaxTokens: 12000, TopP: f(0.95), Thinking: &provider.Thinking{BudgetTokens: 10000}},
			12000, `,"top_p":0.95,"thinking":{"type":"enabled","budget_tokens":10000}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := provider.ValidateParams(provider.KindAnthropic, tc.params); err != nil {
				t.Fatalf("ValidateParams: %v", err)
			}
			s := newServer(t, providertest.Options{})
			req := request()
			req.Params = tc.params
			c := newClient(t, Options{BaseURL: s.URL, NoPromptCache: true}) // the marks: cache_test.go
			if res, _ := streamT(t, c, req); res.Message.StopReason != provider.StopEnd {
				t.Fatalf("result %+v", res)
			}
			reqs, err := s.WaitRequests(testkit.Context(t), 1)
			if err != nil {
				t.Fatal(err)
			}
			want := `{"model":"claude-sonnet-4-5","max_tokens":` + strconv.Itoa(tc.maxTokens) + `,"system":"be brief",` +
				`"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]` + tc.extra + `,"stream":true}`
			if body := string(reqs[0].Body); body != want {
				t.Errorf("body\n%s\nwant\n%s", body, want)
			}
		})
	}
}

// Provenance is the session's: it is never sent.
func TestOriginIsNeverSent(t *testing.T) {
	s := newServer(t, providertest.Options{Answer: &providertest.Answer{Thinking: []string{"hm"}, Text: []string{"ok"}}})
	c := newClient(t, Options{BaseURL: s.URL})
	first := thinkingRequest("")
	res, _ := streamT(t, c, first)
	res.Message.SetOrigin(provider.Origin{Provider: "anthropic-main", Model: model, Account: "acct-origin-marker"})
	if res2, _ := streamT(t, c, followUp(first, res, "next")); res2.Message.StopReason != provider.StopEnd {
		t.Fatalf("second call %+v", res2)
	}
	reqs, err := s.WaitRequests(testkit.Context(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	if b := string(reqs[1].Body); strings.Contains(b, "origin") || strings.Contains(b, "acct-origin-marker") || strings.Contains(b, "anthropic-main") {
		t.Errorf("the body carries provenance: %s", b)
	}
}

// With thinking off, a final assistant turn (a prefill) loses its thinking
// blocks, which the API refuses there; earlier turns keep theirs.
func TestFinalThinkingWithThinkingOff(t *testing.T) {
	signed := provider.Block{Type: provider.BlockThinking, Text: "t", Signature: "sig"}
	req := request()
	req.Messages = append(req.Messages,
		provider.Message{Role: provider.RoleAssistant, Content: []provider.Block{signed, {Type: provider.BlockText, Text: "a"}}},
		provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "b"}}},
		provider.Message{Role: provider.RoleAssistant, Content: []provider.Block{signed, {Type: provider.BlockRedactedThinking, Data: "d"}, {Type: provider.BlockText, Text: "The answer is"}}},
	)
	c := New(Options{NoPromptCache: true}) // the marks: cache_test.go
	got, _ := json.Marshal(c.requestBody(req).Messages)
	want := `[{"role":"user","content":[{"type":"text","text":"hi"}]},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"sig"},{"type":"text","text":"a"}]},` +
		`{"role":"user","content":[{"type":"text","text":"b"}]},` +
		`{"role":"assistant","content":[{"type":"text","text":"The answer is"}]}]`
	if string(got) != want {
		t.Errorf("thinking off:\n%s\nwant\n%s", got, want)
	}
	req.Params.Thinking = &provider.Thinking{}
	got, _ = json.Marshal(c.requestBody(req).Messages)
	if !strings.Contains(string(got), `{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"sig"},{"type":"redacted_thinking","data":"d"},{"type":"text","text":"The answer is"}]}]`) {
		t.Errorf("thinking on: %s", got)
	}
}
