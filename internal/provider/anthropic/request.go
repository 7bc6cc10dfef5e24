package anthropic

import (
	"encoding/json"
	"slices"

	"github.com/agentd/agentd/internal/provider"
)

// messagesRequest is the body of POST /v1/messages.
type messagesRequest struct {
	Model     string        `json:"model"`
	MaxTokens int           `json:"max_tokens"`
	System    string        `json:"system,omitempty"`
	Messages  []wireMessage `json:"messages"`
	Tools     []wireTool    `json:"tools,omitempty"`
	Stream    bool          `json:"stream"`
}

type wireMessage struct {
	Role    string      `json:"role"`
	Content []wireBlock `json:"content"`
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Data      string          `json:"data,omitempty"` // redacted_thinking
	ID        string          `json:"id,omitempty"`   // tool_use
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"` // tool_result
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

type wireTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// emptyObject is the JSON of a tool call without arguments and of a tool
// without an input schema's properties.
var (
	emptyObject  = json.RawMessage(`{}`)
	objectSchema = json.RawMessage(`{"type":"object"}`)
)

func (c *Client) requestBody(req *provider.Request) messagesRequest {
	body := messagesRequest{
		Model:     req.Model,
		MaxTokens: c.opts.MaxTokens,
		System:    req.System,
		Messages:  messages(req.Messages),
		Stream:    true,
	}
	for _, t := range req.Tools {
		schema := t.InputSchema
		if len(schema) == 0 || !json.Valid(schema) {
			schema = objectSchema
		}
		body.Tools = append(body.Tools, wireTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	return body
}

// messages maps the runtime context onto Messages API turns:
//
//   - user and tool messages are user turns (tool results become tool_result
//     blocks), assistant messages assistant turns; other roles are skipped;
//   - an assistant message that ended in error or was aborted and has no
//     content is skipped, and so is any message left without content;
//   - empty text blocks are dropped (the API rejects them), and so are
//     thinking blocks: provider.Block has no room for the signature the API
//     requires to accept them back, and previous turns' thinking may be
//     omitted; redacted_thinking blocks are sent back (their Text is the
//     opaque data);
//   - consecutive turns of the same role are merged into one, so that roles
//     alternate as the API requires, with tool_result blocks first in a
//     merged user turn (the API wants them right after the tool_use turn).
func messages(msgs []provider.Message) []wireMessage {
	out := []wireMessage{}
	for _, m := range msgs {
		var role string
		switch m.Role {
		case provider.RoleUser, provider.RoleTool:
			role = "user"
		case provider.RoleAssistant:
			role = "assistant"
			if (m.StopReason == provider.StopError || m.StopReason == provider.StopAborted) && len(m.Content) == 0 {
				continue
			}
		default:
			continue
		}
		blocks := wireBlocks(role, m.Content)
		if len(blocks) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			continue
		}
		out = append(out, wireMessage{Role: role, Content: blocks})
	}
	for i := range out {
		if out[i].Role == "user" {
			// tool_result blocks first; a stable sort keeps the rest in order.
			slices.SortStableFunc(out[i].Content, func(x, y wireBlock) int {
				return rank(x) - rank(y)
			})
		}
	}
	return out
}

func rank(b wireBlock) int {
	if b.Type == "tool_result" {
		return 0
	}
	return 1
}

// wireBlocks maps a message's blocks for a turn of role; blocks that do not
// belong in such a turn are dropped.
func wireBlocks(role string, content []provider.Block) []wireBlock {
	var out []wireBlock
	for _, b := range content {
		switch b.Type {
		case provider.BlockText:
			if b.Text != "" {
				out = append(out, wireBlock{Type: "text", Text: b.Text})
			}
		case provider.BlockRedactedThinking:
			if role == "assistant" && b.Text != "" {
				out = append(out, wireBlock{Type: "redacted_thinking", Data: b.Text})
			}
		case provider.BlockToolCall:
			if role == "assistant" {
				input := b.ToolInput
				if len(input) == 0 || !json.Valid(input) {
					input = emptyObject
				}
				out = append(out, wireBlock{Type: "tool_use", ID: b.ToolCallID, Name: b.ToolName, Input: input})
			}
		case provider.BlockToolResult:
			if role == "user" {
				out = append(out, wireBlock{Type: "tool_result", ToolUseID: b.ToolCallID, Content: b.Text, IsError: b.IsError})
			}
		}
	}
	return out
}
