package anthropic

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// sameAsMarshal fails t unless encodeRequest writes what json.Marshal does
// (or both refuse body).
func sameAsMarshal(t *testing.T, name string, body *messagesRequest) {
	t.Helper()
	testkit.SameAsMarshal(t, name, body, encodeRequest, func(b *messagesRequest) bool {
		_, direct := appendRequest(nil, b)
		return direct
	})
}

func ptr[T any](v T) *T { return &v }

// odd is a string with everything json.Marshal escapes or replaces.
const odd = testkit.Odd

func TestEncodeRequestIsMarshal(t *testing.T) {
	client := New(Options{MaxTokens: 1024})
	thinking := provider.Params{Thinking: &provider.Thinking{Effort: "medium"}, Temperature: ptr(0.7), TopP: ptr(1e-7),
		StopSequences: []string{"\n\nHuman:", odd}}
	reqs := map[string]*provider.Request{
		"one prompt": {Model: "claude-x", Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hello"}}}}},
		"a system prompt, tools and a whole turn": {Model: "claude-x", System: odd, Params: thinking,
			Tools: []provider.Tool{
				{Name: "get", Description: "gets <things> & more", InputSchema: json.RawMessage(` { "type" : "object", "properties": {"q": {"type":"string","description":"a < b \u2028"}} } `)},
				{Name: "bare"},
				{Name: "broken", InputSchema: json.RawMessage(`{"type":`)},
			},
			Messages: []provider.Message{
				{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: odd}}},
				{Role: provider.RoleAssistant, Content: []provider.Block{
					{Type: provider.BlockThinking, Text: "", Signature: "sig=="},
					{Type: provider.BlockThinking, Text: "unsigned: dropped"},
					{Type: provider.BlockRedactedThinking, Data: "opaque"},
					{Type: provider.BlockText, Text: "calling"},
					{Type: provider.BlockToolCall, ToolCallID: "tu_1", ToolName: "get", ToolInput: json.RawMessage(` {"q": "<x>"} `)},
					{Type: provider.BlockToolCall, ToolCallID: "tu_2", ToolName: "bare"},
				}},
				{Role: provider.RoleTool, Content: []provider.Block{
					{Type: provider.BlockToolResult, ToolCallID: "tu_1", Text: odd},
					{Type: provider.BlockToolResult, ToolCallID: "tu_2", Text: "failed", IsError: true},
				}},
				{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "next"}}},
			}},
		"no messages": {Model: "m", Params: provider.Params{MaxTokens: 7, Temperature: ptr(0.0), TopP: ptr(1e21)}},
	}
	for name, req := range reqs {
		body := client.requestBody(req)
		sameAsMarshal(t, name, &body)
		if _, direct := appendRequest(nil, &body); !direct {
			t.Errorf("%s: left to json.Marshal", name)
		}
		nc := New(Options{MaxTokens: 1024, NoPromptCache: true}).requestBody(req)
		sameAsMarshal(t, name+", no prompt cache", &nc)
	}
	// What requestBody never builds but the encoder must still match.
	for name, body := range map[string]messagesRequest{
		"nil messages and blocks":   {Model: "m", System: []wireBlock(nil), Messages: []wireMessage{{Role: "user"}}},
		"no system":                 {Model: "m", Messages: []wireMessage{}},
		"another system type":       {Model: "m", System: map[string]string{"a": "b"}},
		"NaN temperature":           {Model: "m", Temperature: ptr(math.NaN())},
		"infinite top_p":            {Model: "m", TopP: ptr(math.Inf(-1))},
		"small and large floats":    {Model: "m", Temperature: ptr(-1.5e-9), TopP: ptr(123456789.125)},
		"an invalid raw input":      {Model: "m", Messages: []wireMessage{{Role: "assistant", Content: []wireBlock{{Type: "tool_use", Input: json.RawMessage(`{nope}`)}}}}},
		"an empty non-nil schema":   {Model: "m", Tools: []wireTool{{Name: "t", InputSchema: json.RawMessage{}}}},
		"a nil schema":              {Model: "m", Tools: []wireTool{{Name: "t"}}},
		"a thinking pointer to odd": {Model: "m", Messages: []wireMessage{{Role: "assistant", Content: []wireBlock{{Type: "thinking", Thinking: ptr(odd), Signature: ptr("")}}}}},
	} {
		sameAsMarshal(t, name, &body)
	}
}

// FuzzEncodeRequest holds encodeRequest to json.Marshal's bytes. Run it with
//
//	go test -run '^$' -fuzz '^FuzzEncodeRequest$' -fuzztime 5m ./internal/provider/anthropic/
func FuzzEncodeRequest(f *testing.F) {
	f.Add("hello", "system", `{"type":"object"}`, 0.5, 1024)
	f.Add(odd, odd, ` [1, "<&>", {"a" : null}] `, 1e-7, 0)
	f.Add("", "", `{`, math.Inf(1), -3)
	f.Fuzz(func(t *testing.T, text, system, raw string, temp float64, maxTokens int) {
		body := messagesRequest{Model: text, MaxTokens: maxTokens, System: system, Temperature: &temp, Stream: true,
			StopSequences: []string{system},
			Messages: []wireMessage{
				{Role: "user", Content: []wireBlock{{Type: "text", Text: text, CacheControl: ephemeral}}},
				{Role: "assistant", Content: []wireBlock{{Type: "tool_use", ID: system, Name: text, Input: json.RawMessage(raw)}}},
			},
			Tools: []wireTool{{Name: text, Description: system, InputSchema: json.RawMessage(raw)}},
		}
		sameAsMarshal(t, "fuzz", &body)
	})
}

// longHistory is providertest.AgentHistory's Messages body.
func longHistory(turns int) *messagesRequest {
	body := New(Options{MaxTokens: 1024}).requestBody(providertest.AgentHistory("claude-x", turns))
	return &body
}

// The body's buffer is taken once, at about its size: a long history is
// neither copied as its buffer doubles nor given twice the room it needs.
func TestEncodeRequestTakesItsBufferOnce(t *testing.T) {
	for _, turns := range []int{0, 1, 10, 60} {
		body, name := longHistory(turns), fmt.Sprintf("%d turns", turns)
		sameAsMarshal(t, name, body)
		testkit.EncodesInOneBuffer(t, name, body, encodeRequest, requestSize)
	}
}

func BenchmarkEncodeRequest(b *testing.B) {
	for _, turns := range []int{1, 20} {
		body := longHistory(turns)
		b.Run(fmt.Sprintf("turns=%d", turns), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encodeRequest(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
