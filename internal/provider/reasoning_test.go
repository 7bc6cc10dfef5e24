package provider

import (
	"encoding/json"
	"reflect"
	"testing"
)

func assistant(blocks ...Block) Message { return Message{Role: RoleAssistant, Content: blocks} }

var (
	textBlock  = Block{Type: BlockText, Text: "answer"}
	signed     = Block{Type: BlockThinking, Text: "thought", Signature: "sig-a", Origin: Origin{Provider: "anthropic", Model: "claude-a", Account: "acct-1"}}
	sigOnly    = Block{Type: BlockThinking, Signature: "sig-b", Origin: Origin{Provider: "anthropic", Model: "claude-a", Account: "acct-1"}}
	redacted   = Block{Type: BlockRedactedThinking, Data: "opaque", Origin: Origin{Provider: "anthropic", Model: "claude-a", Account: "acct-1"}}
	reasoning  = Block{Type: BlockThinking, Text: "summary", ReasoningID: "rs_1", EncryptedContent: "gAAAAAB1", Summary: []string{"summary"}, Origin: Origin{Provider: "openai", Model: "gpt-5", Account: "org-1"}}
	unknown    = Block{Type: BlockThinking, Text: "old", Signature: "sig-old"}
	displayOne = Block{Type: BlockThinking, Text: "display"}
)

func TestStripReasoning(t *testing.T) {
	user := Message{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "hi"}}}
	msgs := []Message{user, assistant(redacted, signed, sigOnly, textBlock), user, assistant(reasoning, displayOne, textBlock)}
	orig := clone(msgs)
	got := StripReasoning(msgs)
	want := []Message{user, assistant(Block{Type: BlockThinking, Text: "thought", Origin: signed.Origin}, textBlock), user,
		assistant(Block{Type: BlockThinking, Text: "summary", Origin: reasoning.Origin}, displayOne, textBlock)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("StripReasoning =\n%+v\nwant\n%+v", got, want)
	}
	if !reflect.DeepEqual(msgs, orig) {
		t.Errorf("StripReasoning modified its input")
	}
	if &got[0].Content[0] != &msgs[0].Content[0] {
		t.Errorf("a message without reasoning state was copied")
	}
	plain := []Message{user, assistant(displayOne, textBlock)}
	if got := StripReasoning(plain); &got[0] != &plain[0] {
		t.Errorf("a history without reasoning state was copied")
	}
	for _, m := range got {
		if m.HasReasoningState() {
			t.Errorf("%+v still has reasoning state", m)
		}
	}
}

func TestStripForeignReasoning(t *testing.T) {
	msgs := []Message{assistant(redacted, signed, textBlock), assistant(reasoning, unknown)}
	for _, tc := range []struct {
		name   string
		target Origin
		kept   []string // the signatures, data and reasoning ids left
	}{
		{"same everything", Origin{Provider: "anthropic", Model: "claude-a", Account: "acct-1"}, []string{"opaque", "sig-a", "sig-old"}},
		{"other model", Origin{Provider: "anthropic", Model: "claude-b", Account: "acct-1"}, []string{"sig-old"}},
		{"other account", Origin{Provider: "anthropic", Model: "claude-a", Account: "acct-2"}, []string{"sig-old"}},
		{"openai", Origin{Provider: "openai", Model: "gpt-5", Account: "org-1"}, []string{"rs_1", "sig-old"}},
	} {
		var kept []string
		for _, m := range StripForeignReasoning(msgs, tc.target) {
			for _, b := range m.Content {
				for _, s := range []string{b.Data, b.Signature, b.ReasoningID} {
					if s != "" {
						kept = append(kept, s)
					}
				}
			}
		}
		if !reflect.DeepEqual(kept, tc.kept) {
			t.Errorf("%s: kept %q, want %q", tc.name, kept, tc.kept)
		}
	}
}

// StripReasoningFor drops what a target was sent (its own and unknown
// origins') and keeps the rest for later calls to the others.
func TestStripReasoningFor(t *testing.T) {
	msgs := []Message{assistant(redacted, signed, textBlock), assistant(reasoning, unknown)}
	orig := clone(msgs)
	var kept []string
	for _, m := range StripReasoningFor(msgs, Origin{Provider: "anthropic", Model: "claude-a", Account: "acct-1"}) {
		for _, b := range m.Content {
			for _, s := range []string{b.Data, b.Signature, b.ReasoningID} {
				if s != "" {
					kept = append(kept, s)
				}
			}
		}
	}
	if want := []string{"rs_1"}; !reflect.DeepEqual(kept, want) {
		t.Errorf("kept %q, want %q", kept, want)
	}
	if !reflect.DeepEqual(msgs, orig) {
		t.Errorf("StripReasoningFor modified its input")
	}
}

func TestSetOrigin(t *testing.T) {
	o := Origin{Provider: "p", Model: "m", Account: "a"}
	m := assistant(textBlock, signed)
	m.SetOrigin(o)
	if m.Content[0].Origin != o || m.Content[1].Origin != signed.Origin {
		t.Errorf("SetOrigin: %+v", m.Content)
	}
	if !(Origin{Model: "m"}).Matches(o) || (Origin{Model: "x"}).Matches(o) || !(Origin{}).Matches(o) || !o.Matches(o) {
		t.Errorf("Matches")
	}
}

// Blocks keep their reasoning state and origin through JSON (the session's
// history), and say nothing of them when they have none.
func TestBlockJSON(t *testing.T) {
	for _, b := range []Block{signed, sigOnly, redacted, reasoning} {
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		var back Block
		if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, b) {
			t.Errorf("%s → %+v (%v), want %+v", data, back, err, b)
		}
	}
	if data, _ := json.Marshal(textBlock); string(data) != `{"type":"text","text":"answer"}` {
		t.Errorf("text block JSON %s", data)
	}
	data, _ := json.Marshal(reasoning)
	want := `{"type":"thinking","text":"summary","reasoningId":"rs_1","encryptedContent":"gAAAAAB1","summary":["summary"],` +
		`"origin":{"provider":"openai","model":"gpt-5","account":"org-1"}}`
	if string(data) != want {
		t.Errorf("reasoning block JSON\n%s\nwant\n%s", data, want)
	}
}

func TestHasObservableOutputCountsRedactedData(t *testing.T) {
	if m := assistant(Block{Type: BlockRedactedThinking, Data: "x"}); !m.HasObservableOutput() {
		t.Errorf("redacted data is observable output")
	}
	if m := assistant(sigOnly); m.HasObservableOutput() {
		t.Errorf("a signature alone is not observable output")
	}
}

func TestOpenToolTurnLacksThinking(t *testing.T) {
	call := Block{Type: BlockToolCall, ToolCallID: "c1", ToolName: "t"}
	results := Message{Role: RoleTool, Content: []Block{{Type: BlockToolResult, ToolCallID: "c1", Text: "1"}}}
	userResults := Message{Role: RoleUser, Content: []Block{{Type: BlockToolResult, ToolCallID: "c1", Text: "1"}}}
	user := Message{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "next"}}}
	aborted := Message{Role: RoleAssistant, StopReason: StopAborted}
	for _, tc := range []struct {
		name string
		msgs []Message
		want bool
	}{
		{"text first", []Message{user, assistant(textBlock, call), results}, true},
		{"unsigned thinking first", []Message{user, assistant(displayOne, call), results}, true},
		{"signed thinking first", []Message{user, assistant(signed, textBlock, call), results}, false},
		{"unsigned then signed", []Message{user, assistant(displayOne, signed, call), results}, false},
		{"redacted first", []Message{user, assistant(redacted, call), userResults}, false},
		{"openai reasoning first", []Message{user, assistant(reasoning, call), results}, true},
		{"call pending", []Message{user, assistant(textBlock, call)}, true},
		{"after an aborted retry", []Message{user, assistant(textBlock, call), results, aborted}, true},
		{"loop closed by a prompt", []Message{user, assistant(textBlock, call), results, assistant(textBlock), user}, false},
		{"no tools", []Message{user, assistant(textBlock), user}, false},
		{"empty", nil, false},
	} {
		if got := OpenToolTurnLacksThinking(tc.msgs); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func clone(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		out[i].Content = append([]Block(nil), m.Content...)
	}
	return out
}
