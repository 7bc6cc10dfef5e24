package providertest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// AgentHistory is a request an agent loop sends after turns turns: a system
// prompt, one tool, and per turn a user question, an assistant answer with
// signed thinking and a tool call, and the tool's result; every text plain.
// The providers' encoders' tests and benchmarks build their bodies from it.
func AgentHistory(model string, turns int) *provider.Request {
	req := &provider.Request{Model: model, System: strings.Repeat("You are careful. ", 40), SessionID: "s-1",
		Tools: []provider.Tool{{Name: "get", Description: "gets a page", InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}}}
	for i := range turns {
		id := fmt.Sprintf("call_%d", i)
		req.Messages = append(req.Messages,
			provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: strings.Repeat("a question ", 50+i)}}},
			provider.Message{Role: provider.RoleAssistant, Content: []provider.Block{
				{Type: provider.BlockThinking, Text: strings.Repeat("thinking it over ", 20), Signature: "c2lnbmF0dXJl"},
				{Type: provider.BlockText, Text: strings.Repeat("an answer ", 150)},
				{Type: provider.BlockToolCall, ToolCallID: id, ToolName: "get", ToolInput: json.RawMessage(`{"q":"x"}`)},
			}},
			provider.Message{Role: provider.RoleTool, Content: []provider.Block{{Type: provider.BlockToolResult, ToolCallID: id, Text: strings.Repeat("a result ", 80)}}})
	}
	return req
}
