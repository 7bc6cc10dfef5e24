package providertest

import (
	"io"
	"strings"
	"testing"
)

// The bodies of the fake's reasoning rejections, as the providers send
// them.
func TestReasoningRejectionBodies(t *testing.T) {
	if got, want := AnthropicInvalidSignature(1, 0),
		`{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `+"`signature`"+` in `+"`thinking`"+` block"}}`; got != want {
		t.Errorf("AnthropicInvalidSignature = %s\nwant %s", got, want)
	}
	order := "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, " +
		"a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). " +
		"We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. " +
		"Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
	if got, want := AnthropicThinkingOrder(1, "text"), `{"type":"error","error":{"type":"invalid_request_error","message":"`+order+`"}}`; got != want {
		t.Errorf("AnthropicThinkingOrder = %s\nwant %s", got, want)
	}
	if got, want := OpenAIInvalidEncryptedContent("rs_1", false),
		`{"error":{"message":"The encrypted content for item rs_1 could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}`; got != want {
		t.Errorf("OpenAIInvalidEncryptedContent = %s\nwant %s", got, want)
	}
}

func TestAnthropicReasoningRules(t *testing.T) {
	s := NewServer(Options{Accounts: map[string]string{"key-b": "acct-b"}})
	defer s.Close()
	sig := AnthropicSignature(DefaultAccount, "claude", "hm")
	history := func(thinking string) string {
		return `{"model":"claude","stream":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` + thinking +
			`{"type":"text","text":"ok"}]},{"role":"user","content":[{"type":"text","text":"and?"}]}]}`
	}
	toolLoop := func(first string, thinkingOn bool) string {
		th := ""
		if thinkingOn {
			th = `"thinking":{"type":"enabled","budget_tokens":1024},`
		}
		return `{"model":"claude",` + th + `"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` + first +
			`{"type":"tool_use","id":"toolu_1","name":"get","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"1"}]}]}`
	}
	for _, tc := range []struct {
		name, key, body string
		status          int
		want            string
	}{
		{"signed", "key-a", history(`{"type":"thinking","thinking":"hm","signature":"` + sig + `"},`), 200, ""},
		{"missing signature", "key-a", history(`{"type":"thinking","thinking":"hm"},`), 400, AnthropicInvalidSignature(1, 0)},
		{"empty signature", "key-a", history(`{"type":"thinking","thinking":"hm","signature":""},`), 400, AnthropicInvalidSignature(1, 0)},
		{"altered text", "key-a", history(`{"type":"thinking","thinking":"hmm","signature":"` + sig + `"},`), 400, AnthropicInvalidSignature(1, 0)},
		{"other account", "key-b", history(`{"type":"thinking","thinking":"hm","signature":"` + sig + `"},`), 400, AnthropicInvalidSignature(1, 0)},
		{"second block", "key-a", history(`{"type":"redacted_thinking","data":"opaque"},{"type":"thinking","thinking":"x","signature":"bad"},`), 400, AnthropicInvalidSignature(1, 1)},
		{"tool loop without thinking, thinking on", "key-a", toolLoop(`{"type":"text","text":"look"},`, true), 400, AnthropicThinkingOrder(1, "text")},
		{"tool loop starting with tool_use", "key-a", toolLoop(``, true), 400, AnthropicThinkingOrder(1, "tool_use")},
		{"tool loop without thinking, thinking off", "key-a", toolLoop(`{"type":"text","text":"look"},`, false), 200, ""},
		{"tool loop with redacted thinking first", "key-a", toolLoop(`{"type":"redacted_thinking","data":"opaque"},`, true), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, s, "/v1/messages", tc.body, "x-api-key", tc.key)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || (tc.want != "" && string(b) != tc.want) {
				t.Errorf("%d %s\nwant %d %s", resp.StatusCode, b, tc.status, tc.want)
			}
		})
	}

	lenient := NewServer(Options{NoReasoningChecks: true})
	defer lenient.Close()
	if resp := post(t, lenient, "/v1/messages", history(`{"type":"thinking","thinking":"hm"},`)); resp.StatusCode != 200 {
		t.Errorf("NoReasoningChecks: %d", resp.StatusCode)
	}
}

func TestResponsesReasoningRules(t *testing.T) {
	s := NewServer(Options{Accounts: map[string]string{"key-b": "org-b"}})
	defer s.Close()
	enc := OpenAIEncryptedContent(DefaultAccount, "rs_1")
	input := func(item string, store bool) string {
		st := "false"
		if store {
			st = "true"
		}
		return `{"model":"gpt-5","stream":true,"store":` + st + `,"input":[{"type":"message","role":"user","content":"hi"},` + item +
			`,{"type":"message","role":"assistant","content":"ok"},{"type":"message","role":"user","content":"and?"}]}`
	}
	for _, tc := range []struct {
		name, key, body string
		status          int
		want            string
	}{
		{"own content", "key-a", input(`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"`+enc+`"}`, false), 200, ""},
		{"other organisation", "key-b", input(`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"`+enc+`"}`, false), 400,
			OpenAIInvalidEncryptedContent("rs_1", true)},
		{"other item", "key-a", input(`{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"`+enc+`"}`, false), 400,
			OpenAIInvalidEncryptedContent("rs_2", false)},
		{"garbage", "key-a", input(`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"not base64"}`, false), 400,
			OpenAIInvalidEncryptedContent("rs_1", false)},
		{"id only, store false", "key-a", input(`{"type":"reasoning","id":"rs_1","summary":[]}`, false), 404, OpenAIItemNotFound("rs_1")},
		{"id only, store true", "key-a", input(`{"type":"reasoning","id":"rs_1","summary":[]}`, true), 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, s, "/v1/responses", tc.body, "Authorization", "Bearer "+tc.key)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || (tc.want != "" && string(b) != tc.want) {
				t.Errorf("%d %s\nwant %d %s", resp.StatusCode, b, tc.status, tc.want)
			}
		})
	}
}

// Streams carry the reasoning state: Anthropic's signature_delta just
// before content_block_stop, Responses' encrypted_content when asked for.
func TestReasoningStateInFrames(t *testing.T) {
	a := &Answer{Thinking: []string{"a", "b"}, Text: []string{"x"}}
	f := Frames("anthropic", "m", a)
	sig := `{"type": "signature_delta", "signature": "` + AnthropicSignature(DefaultAccount, "m", "ab") + `"}}`
	if !strings.Contains(f, sig+"\n\nevent: content_block_stop\n") {
		t.Errorf("anthropic frames lack the signature before content_block_stop:\n%s", f)
	}
	a.Redacted = []string{"opaque=="}
	if f := Frames("anthropic", "m", a); !strings.Contains(f, `"content_block": {"type": "redacted_thinking", "data": "opaque=="}`) {
		t.Errorf("anthropic frames lack the redacted block:\n%s", f)
	}
	if f := Frames("openai-responses", "m", a); strings.Contains(f, "encrypted_content") {
		t.Errorf("responses frames carry encrypted content unasked:\n%s", f)
	}
	s := NewServer(Options{})
	defer s.Close()
	s.Enqueue(Step{Answer: &Answer{EmptyThinking: true, Text: []string{"x"}}})
	resp := post(t, s, "/v1/responses", `{"model":"m","stream":true,"store":false,"include":["reasoning.encrypted_content"]}`)
	b, _ := io.ReadAll(resp.Body)
	want := `"item":{"id":"rs_test0000","type":"reasoning","summary":[],"encrypted_content":"` + OpenAIEncryptedContent(DefaultAccount, "rs_test0000") + `"}`
	if !strings.Contains(string(b), want) {
		t.Errorf("responses stream lacks %s:\n%s", want, b)
	}
}
