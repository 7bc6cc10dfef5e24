package gemini

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
func sameAsMarshal(t *testing.T, name string, body *generateRequest) {
	t.Helper()
	testkit.SameAsMarshal(t, name, body, encodeRequest, func(b *generateRequest) bool {
		_, direct := appendRequest(nil, b)
		return direct
	})
}

func fptr(f float64) *float64 { return &f }

func TestEncodeRequestIsMarshal(t *testing.T) {
	odd := testkit.Odd
	params := provider.Params{MaxTokens: 300, Thinking: &provider.Thinking{Effort: "high"}, Temperature: fptr(0.7),
		TopP: fptr(1e-7), StopSequences: []string{"\n\nUser:", odd}}
	reqs := map[string]*provider.Request{
		"one prompt": {Model: "gemini-x", Messages: []provider.Message{
			{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hello"}}}}},
		"a system prompt, tools and a whole turn": {Model: "gemini-x", System: odd, Params: params,
			Tools: []provider.Tool{
				{Name: "get", Description: "gets <things> & more", InputSchema: json.RawMessage(` { "type" : "object", "properties": {"q": {"type":"string","description":"a < b \u2028"}} } `)},
				{Name: "bare"},
			},
			Messages: []provider.Message{
				{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: odd}}},
				{Role: provider.RoleAssistant, Content: []provider.Block{
					{Type: provider.BlockThinking, Text: "thinking <it> over", Signature: "sig=="},
					{Type: provider.BlockThinking, Text: "", Signature: "sig-only"},
					{Type: provider.BlockText, Text: "calling"},
					{Type: provider.BlockToolCall, ToolCallID: "call_1", ToolName: "get", ToolInput: json.RawMessage(` {"q": "<x>"} `)},
					{Type: provider.BlockToolCall, ToolCallID: "call_2", ToolName: "bare"},
				}},
				{Role: provider.RoleTool, Content: []provider.Block{
					{Type: provider.BlockToolResult, ToolCallID: "call_1", Text: odd},
					{Type: provider.BlockToolResult, ToolCallID: "call_2", Text: "failed", IsError: true},
				}},
				{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "next"}}},
			}},
		"no messages": {Model: "m", Params: provider.Params{Temperature: fptr(0), TopP: fptr(1e21)}},
	}
	for name, req := range reqs {
		body := requestBody(req)
		sameAsMarshal(t, name, &body)
		if _, direct := appendRequest(nil, &body); !direct {
			t.Errorf("%s: left to json.Marshal", name)
		}
	}
	// What requestBody never builds but the encoder must still match.
	for name, body := range map[string]generateRequest{
		"nil contents and parts":       {Contents: []content{{Role: "user"}}},
		"an empty generation config":   {GenerationConfig: &generationConfig{}},
		"thinking config alone":        {GenerationConfig: &generationConfig{ThinkingConfig: &thinkingConfig{}}},
		"NaN temperature":              {GenerationConfig: &generationConfig{Temperature: fptr(math.NaN())}},
		"infinite top_p":               {GenerationConfig: &generationConfig{TopP: fptr(math.Inf(1))}},
		"a schema that is not JSON":    {Tools: []tool{{FunctionDeclarations: []functionDeclaration{{Name: "t", ParametersJSONSchema: json.RawMessage(`{nope}`)}}}}},
		"nil declarations":             {Tools: []tool{{}}},
		"arguments that are not JSON":  {Contents: []content{{Parts: []part{{FunctionCall: &functionCall{Name: "f", Args: json.RawMessage(`[1,`)}}}}}},
		"a response of other values":   {Contents: []content{{Parts: []part{{FunctionResponse: &functionResponse{Name: "f", Response: map[string]any{"n": 1, "s": "<x>"}}}}}}},
		"a response of sorted strings": {Contents: []content{{Parts: []part{{FunctionResponse: &functionResponse{Name: "f", Response: map[string]any{"z": "1", "a<": odd, "é": ""}}}}}}},
		"a nil response":               {Contents: []content{{Parts: []part{{FunctionResponse: &functionResponse{Name: "f"}}}}}},
		"a thought without data":       {Contents: []content{{Parts: []part{{Thought: true}, {ThoughtSignature: "s"}, {}}}}},
	} {
		sameAsMarshal(t, name, &body)
	}
}

// FuzzEncodeRequest holds encodeRequest to json.Marshal's bytes. Run it with
//
//	go test -run '^$' -fuzz '^FuzzEncodeRequest$' -fuzztime 5m ./internal/provider/gemini/
func FuzzEncodeRequest(f *testing.F) {
	f.Add("hello", "system", `{"type":"object"}`, 0.5, 1024)
	f.Add(testkit.Odd, testkit.Odd, ` [1, "<&>", {"a" : null}] `, 1e-7, 0)
	f.Add("", "", `{`, math.Inf(1), -3)
	f.Fuzz(func(t *testing.T, text, system, raw string, temp float64, maxTokens int) {
		body := generateRequest{
			Contents: []content{
				{Role: "user", Parts: []part{{Text: text}, {FunctionResponse: &functionResponse{Name: system, Response: map[string]any{text: raw, system: text}}}}},
				{Role: "model", Parts: []part{{Text: system, Thought: maxTokens%2 == 0, ThoughtSignature: raw}, {ThoughtSignature: text},
					{FunctionCall: &functionCall{ID: system, Name: text, Args: json.RawMessage(raw)}}}},
			},
			SystemInstruction: &content{Parts: []part{{Text: system}}},
			Tools:             []tool{{FunctionDeclarations: []functionDeclaration{{Name: text, Description: system, ParametersJSONSchema: json.RawMessage(raw)}}}},
			GenerationConfig: &generationConfig{MaxOutputTokens: maxTokens, Temperature: &temp, StopSequences: []string{system},
				ThinkingConfig: &thinkingConfig{IncludeThoughts: maxTokens%3 == 0, ThinkingBudget: maxTokens}},
		}
		sameAsMarshal(t, "fuzz", &body)
	})
}

// longHistory is providertest.AgentHistory's generateContent body.
func longHistory(turns int) *generateRequest {
	body := requestBody(providertest.AgentHistory("gemini-x", turns))
	return &body
}

// The body's buffer is taken once, at about its size.
func TestEncodeRequestTakesItsBufferOnce(t *testing.T) {
	for _, turns := range []int{0, 1, 10, 60} {
		body, name := longHistory(turns), fmt.Sprintf("%d turns", turns)
		sameAsMarshal(t, name, body)
		testkit.EncodesInOneBuffer(t, name, body, encodeRequest, requestSize)
	}
}

// BenchmarkEncodeRequest: the encoder against json.Marshal of the same
// body.
func BenchmarkEncodeRequest(b *testing.B) {
	body := longHistory(20)
	b.Run("encodeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encodeRequest(body)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(body)
		}
	})
}
