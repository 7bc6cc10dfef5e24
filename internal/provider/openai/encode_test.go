package openai

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// sameAsMarshal fails t unless encodeChat writes what json.Marshal does (or
// both refuse body).
func sameAsMarshal(t *testing.T, name string, body *chatRequest) {
	t.Helper()
	testkit.SameAsMarshal(t, name, body, encodeChat, func(b *chatRequest) bool {
		_, direct := appendChat(nil, b)
		return direct
	})
}

func ptr[T any](v T) *T { return &v }

// odd is a string with everything json.Marshal escapes or replaces.
const odd = testkit.Odd

func TestEncodeChatIsMarshal(t *testing.T) {
	params := provider.Params{MaxTokens: 300, Thinking: &provider.Thinking{Effort: "high"}, Temperature: ptr(0.7),
		TopP: ptr(1e-7), StopSequences: []string{"\n\nUser:", odd}}
	reqs := map[string]*provider.Request{
		"one prompt": {Model: "gpt-x", Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hello"}}}}},
		"a system prompt, tools and a whole turn": {Model: "gpt-x", System: odd, Params: params, SessionID: "s-1",
			Tools: []provider.Tool{
				{Name: "get", Description: "gets <things> & more", InputSchema: json.RawMessage(` { "type" : "object", "properties": {"q": {"type":"string","description":"a < b \u2028"}} } `)},
				{Name: "bare"},
			},
			Messages: []provider.Message{
				{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: odd}}},
				{Role: provider.RoleAssistant, Content: []provider.Block{
					{Type: provider.BlockThinking, Text: "not sent back"},
					{Type: provider.BlockText, Text: "calling"},
					{Type: provider.BlockToolCall, ToolCallID: "call_1", ToolName: "get", ToolInput: json.RawMessage(` {"q": "<x>"} `)},
					{Type: provider.BlockToolCall, ToolCallID: "call_2", ToolName: "bare"},
				}},
				{Role: provider.RoleTool, Content: []provider.Block{
					{Type: provider.BlockToolResult, ToolCallID: "call_1", Text: odd},
					{Type: provider.BlockToolResult, ToolCallID: "call_2", Text: "failed", IsError: true},
				}},
				{Role: provider.RoleAssistant, Content: []provider.Block{
					{Type: provider.BlockToolCall, ToolCallID: "call_3", ToolName: "get", ToolInput: json.RawMessage(`{}`)}}},
				{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "next"}}},
			}},
		"no messages": {Model: "m", Params: provider.Params{Temperature: ptr(0.0), TopP: ptr(1e21)}},
	}
	for name, req := range reqs {
		for _, noStreamOptions := range []bool{false, true} {
			body := chatBody(req, noStreamOptions)
			body.PromptCacheKey = req.SessionID
			sameAsMarshal(t, name, &body)
			if _, direct := appendChat(nil, &body); !direct {
				t.Errorf("%s: left to json.Marshal", name)
			}
		}
	}
	// What chatBody never builds but the encoder must still match.
	for name, body := range map[string]chatRequest{
		"nil messages":              {Model: "m"},
		"empty tool calls":          {Model: "m", Messages: []chatMessage{{Role: "assistant", ToolCalls: []chatToolCall{}}}},
		"content of another type":   {Model: "m", Messages: []chatMessage{{Role: "user", Content: []string{"a", "<b>"}}}},
		"NaN temperature":           {Model: "m", Temperature: ptr(math.NaN())},
		"infinite top_p":            {Model: "m", TopP: ptr(math.Inf(-1))},
		"small and large floats":    {Model: "m", Temperature: ptr(-1.5e-9), TopP: ptr(123456789.125)},
		"a schema that is not JSON": {Model: "m", Tools: []chatTool{{Type: "function", Function: chatToolDef{Name: "t", Parameters: json.RawMessage(`{nope}`)}}}},
		"a nil schema":              {Model: "m", Tools: []chatTool{{Type: "function", Function: chatToolDef{Name: "t"}}}},
		"an empty stop list":        {Model: "m", Stop: []string{}},
	} {
		sameAsMarshal(t, name, &body)
	}
}

// FuzzEncodeChat holds encodeChat to json.Marshal's bytes. Run it with
//
//	go test -run '^$' -fuzz '^FuzzEncodeChat$' -fuzztime 5m ./internal/provider/openai/
func FuzzEncodeChat(f *testing.F) {
	f.Add("hello", "system", `{"type":"object"}`, 0.5, 1024)
	f.Add(odd, odd, ` [1, "<&>", {"a" : null}] `, 1e-7, 0)
	f.Add("", "", `{`, math.Inf(1), -3)
	f.Fuzz(func(t *testing.T, text, system, raw string, temp float64, maxTokens int) {
		body := chatRequest{Model: text, MaxCompletionTokens: maxTokens, Temperature: &temp, Stream: true,
			Stop: []string{system}, ReasoningEffort: text, PromptCacheKey: system,
			StreamOptions: &streamOptions{IncludeUsage: maxTokens%2 == 0},
			Messages: []chatMessage{
				{Role: "system", Content: system},
				{Role: "user", Content: text},
				{Role: "assistant", ToolCalls: []chatToolCall{{ID: system, Type: "function", Function: chatFunction{Name: text, Arguments: raw}}}},
				{Role: "tool", ToolCallID: system, Content: raw},
			},
			Tools: []chatTool{{Type: "function", Function: chatToolDef{Name: text, Description: system, Parameters: json.RawMessage(raw)}}},
		}
		sameAsMarshal(t, "fuzz", &body)
	})
}

// longChat is providertest.AgentHistory's Chat Completions body.
func longChat(turns int) *chatRequest {
	req := providertest.AgentHistory("gpt-x", turns)
	body := chatBody(req, false)
	body.PromptCacheKey = req.SessionID
	return &body
}

// The body's buffer is taken once, at about its size.
func TestEncodeChatTakesItsBufferOnce(t *testing.T) {
	for _, turns := range []int{0, 1, 10, 60} {
		body, name := longChat(turns), fmt.Sprintf("%d turns", turns)
		sameAsMarshal(t, name, body)
		testkit.EncodesInOneBuffer(t, name, body, encodeChat, chatSize)
	}
}

// BenchmarkEncodeChat: the encoder against json.Marshal of the same body.
func BenchmarkEncodeChat(b *testing.B) {
	for _, turns := range []int{1, 20} {
		body := longChat(turns)
		for _, enc := range []struct {
			name string
			f    func(*chatRequest) ([]byte, error)
		}{{"encodeChat", encodeChat}, {"json.Marshal", func(r *chatRequest) ([]byte, error) { return json.Marshal(r) }}} {
			b.Run(fmt.Sprintf("turns=%d/%s", turns, enc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := enc.f(body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// sameResponses is sameAsMarshal for encodeResponses.
func sameResponses(t *testing.T, name string, body *responsesRequest) {
	t.Helper()
	testkit.SameAsMarshal(t, name, body, encodeResponses, func(b *responsesRequest) bool {
		_, direct := appendResponses(nil, b)
		return direct
	})
}

// responsesOf is the body streamResponses sends for req, unchained.
func responsesOf(req *provider.Request) *responsesRequest {
	p := req.Params
	body := &responsesRequest{Model: req.Model, Instructions: req.System, Input: []inputItem{},
		MaxOutputTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP, Stream: true, PromptCacheKey: req.SessionID}
	if p.Thinking != nil {
		body.Reasoning = &reasoningParam{Effort: p.Thinking.Level(), Summary: "auto"}
		body.Include = []string{includeEncryptedReasoning}
	}
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, responsesTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: toolSchema(t)})
	}
	for _, m := range req.Messages {
		body.Input = append(body.Input, items(m)...)
	}
	return body
}

func TestEncodeResponsesIsMarshal(t *testing.T) {
	params := provider.Params{MaxTokens: 300, Thinking: &provider.Thinking{Effort: "high"}, Temperature: ptr(0.7), TopP: ptr(1e-7)}
	whole := &provider.Request{Model: "gpt-x", System: odd, Params: params, SessionID: "s-1",
		Tools: []provider.Tool{
			{Name: "get", Description: "gets <things> & more", InputSchema: json.RawMessage(` { "type" : "object", "properties": {"q": {"type":"string","description":"a < b \u2028"}} } `)},
			{Name: "bare"},
		},
		Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: odd}}},
			{Role: provider.RoleAssistant, Content: []provider.Block{
				{Type: provider.BlockThinking, Text: "summarised", ReasoningID: "rs_1", EncryptedContent: "enc<&>", Summary: []string{odd, "two"}},
				{Type: provider.BlockThinking, ReasoningID: "rs_2", EncryptedContent: "enc", Summary: nil},
				{Type: provider.BlockText, Text: "calling"},
				{Type: provider.BlockToolCall, ToolCallID: "call_1", ToolName: "get", ToolInput: json.RawMessage(` {"q": "<x>"} `)},
			}},
			{Role: provider.RoleTool, Content: []provider.Block{
				{Type: provider.BlockToolResult, ToolCallID: "call_1", Text: odd},
				{Type: provider.BlockToolResult, ToolCallID: "call_2", Text: ""},
			}},
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "next"}}},
		}}
	for name, body := range map[string]*responsesRequest{
		"one prompt": responsesOf(&provider.Request{Model: "gpt-x", Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hello"}}}}}),
		"a whole turn, reasoning and tools": responsesOf(whole),
		"chained": func() *responsesRequest {
			b := responsesOf(whole)
			b.PreviousResponseID, b.Store, b.Input = "resp_<1>", true, b.Input[len(b.Input)-1:]
			return b
		}(),
	} {
		sameResponses(t, name, body)
		if _, direct := appendResponses(nil, body); !direct {
			t.Errorf("%s: left to json.Marshal", name)
		}
	}
	// What streamResponses never builds but the encoder must still match.
	var none []summaryPart
	for name, body := range map[string]responsesRequest{
		"nil input":                 {Model: "m"},
		"a nil summary":             {Model: "m", Input: []inputItem{{Type: "reasoning", ID: "r", Summary: &none}}},
		"an empty summary":          {Model: "m", Input: []inputItem{{Type: "reasoning", ID: "r", Summary: &[]summaryPart{}}}},
		"an empty output":           {Model: "m", Input: []inputItem{{Type: "function_call_output", Output: ptr("")}}},
		"NaN temperature":           {Model: "m", Temperature: ptr(math.NaN())},
		"infinite top_p":            {Model: "m", TopP: ptr(math.Inf(1))},
		"a schema that is not JSON": {Model: "m", Tools: []responsesTool{{Type: "function", Name: "t", Parameters: json.RawMessage(`{nope}`)}}},
		"a nil schema, strict":      {Model: "m", Tools: []responsesTool{{Type: "function", Name: "t", Strict: true}}},
		"an empty include":          {Model: "m", Include: []string{}},
	} {
		sameResponses(t, name, &body)
	}
}

// FuzzEncodeResponses holds encodeResponses to json.Marshal's bytes. Run it
// with
//
//	go test -run '^$' -fuzz '^FuzzEncodeResponses$' -fuzztime 5m ./internal/provider/openai/
func FuzzEncodeResponses(f *testing.F) {
	f.Add("hello", "system", `{"type":"object"}`, 0.5, 1024)
	f.Add(odd, odd, ` [1, "<&>", {"a" : null}] `, 1e-7, 0)
	f.Add("", "", `{`, math.Inf(1), -3)
	f.Fuzz(func(t *testing.T, text, system, raw string, temp float64, maxTokens int) {
		parts := []summaryPart{{Type: "summary_text", Text: text}}
		body := responsesRequest{Model: text, Instructions: system, MaxOutputTokens: maxTokens, Temperature: &temp,
			Reasoning: &reasoningParam{Effort: text, Summary: system}, Include: []string{system},
			PreviousResponseID: text, Store: maxTokens%2 == 0, Stream: true, PromptCacheKey: system,
			Input: []inputItem{
				{Type: "message", Role: "user", Content: text},
				{Type: "reasoning", ID: system, Summary: &parts, EncryptedContent: raw},
				{Type: "function_call", CallID: system, Name: text, Arguments: raw},
				{Type: "function_call_output", CallID: system, Output: &raw},
			},
			Tools: []responsesTool{{Type: "function", Name: text, Description: system, Parameters: json.RawMessage(raw), Strict: maxTokens%3 == 0}},
		}
		sameResponses(t, "fuzz", &body)
	})
}

// longResponses is providertest.AgentHistory's Responses body.
func longResponses(turns int) *responsesRequest {
	return responsesOf(providertest.AgentHistory("gpt-x", turns))
}

// A Responses body's buffer is taken once, at about its size.
func TestEncodeResponsesTakesItsBufferOnce(t *testing.T) {
	for _, turns := range []int{0, 1, 10, 60} {
		body, name := longResponses(turns), fmt.Sprintf("%d turns", turns)
		sameResponses(t, name, body)
		testkit.EncodesInOneBuffer(t, name, body, encodeResponses, responsesSize)
	}
}

// BenchmarkEncodeResponses: the encoder against json.Marshal of the same
// body.
func BenchmarkEncodeResponses(b *testing.B) {
	body := longResponses(20)
	b.Run("encodeResponses", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodeResponses(body)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(body)
		}
	})
}
