package anthropic

import (
	"encoding/json"
	"slices"

	"github.com/agentd/agentd/internal/provider"
)

// messagesRequest is the body of POST /v1/messages.
type messagesRequest struct {
	Model         string        `json:"model"`
	MaxTokens     int           `json:"max_tokens"`
	System        any           `json:"system,omitempty"` // a string, or []wireBlock with a cache mark
	Messages      []wireMessage `json:"messages"`
	Tools         []wireTool    `json:"tools,omitempty"`
	Temperature   *float64      `json:"temperature,omitempty"`
	TopP          *float64      `json:"top_p,omitempty"`
	StopSequences []string      `json:"stop_sequences,omitempty"`
	Thinking      *wireThinking `json:"thinking,omitempty"`
	Stream        bool          `json:"stream"`
}

// wireThinking is the request's thinking: {"type": "enabled",
// "budget_tokens": N}.
type wireThinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens"`
}

type wireMessage struct {
	Role    string      `json:"role"`
	Content []wireBlock `json:"content"`
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`  // thinking: always sent, even empty
	Signature *string         `json:"signature,omitempty"` // thinking
	Data      string          `json:"data,omitempty"`      // redacted_thinking
	ID        string          `json:"id,omitempty"`        // tool_use
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"` // tool_result
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// CacheControl is a prompt-cache breakpoint (see cacheBreakpoints).
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

type wireTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl *cacheControl   `json:"cache_control,omitempty"`
}

// cacheControl is a breakpoint of Anthropic's prompt cache:
// {"type": "ephemeral"} (the default five-minute cache).
type cacheControl struct {
	Type string `json:"type"`
}

// ephemeral is the mark every breakpoint carries.
var ephemeral = &cacheControl{Type: "ephemeral"}

// MaxCacheBreakpoints is the most cache_control marks the API takes in one
// request.
const MaxCacheBreakpoints = 4

// cacheBreakpoints marks the prompt-cache breakpoints of body, at most
// MaxCacheBreakpoints, at positions that stay put from call to call so
// that each call reads the prefix the previous one wrote: the last tool
// (the tools), the system prompt (as a one-block system array), and the
// last block of each of the last two user turns. An agent loop's next call
// ends with a new user turn (a prompt or tool results): its mark on the
// previous last user turn is where the previous call's last mark was, so
// the whole history before it is read from the cache and only the new
// turn is written. A block that cannot carry a mark (thinking) is skipped.
func cacheBreakpoints(body *messagesRequest) {
	if n := len(body.Tools); n > 0 {
		body.Tools[n-1].CacheControl = ephemeral
	}
	if s, ok := body.System.(string); ok && s != "" {
		body.System = []wireBlock{{Type: "text", Text: s, CacheControl: ephemeral}}
	}
	marked := 0
	for i := len(body.Messages) - 1; i >= 0 && marked < 2; i-- {
		m := &body.Messages[i]
		if m.Role != "user" {
			continue
		}
		for j := len(m.Content) - 1; j >= 0; j-- {
			if b := &m.Content[j]; b.Type == "text" || b.Type == "tool_result" {
				b.CacheControl = ephemeral
				marked++
				break
			}
		}
	}
}

// emptyObject is the JSON of a tool call without arguments and of a tool
// without an input schema's properties.
var (
	emptyObject  = json.RawMessage(`{}`)
	objectSchema = json.RawMessage(`{"type":"object"}`)
)

// requestBody maps a request. Params: max_tokens is Params.MaxTokens, else
// Options.MaxTokens; temperature, top_p and stop_sequences as given;
// Params.Thinking is {"type": "enabled", "budget_tokens": Budget()} (effort
// low 1024, medium 4096, high 16384). The API wants budget_tokens below
// max_tokens: when it is not, max_tokens becomes the budget plus
// Options.MaxTokens, the configured room for the answer (ValidateParams
// refuses such a budget with an explicit max_tokens).
func (c *Client) requestBody(req *provider.Request) messagesRequest {
	p := req.Params
	body := messagesRequest{
		Model:         req.Model,
		MaxTokens:     c.opts.MaxTokens,
		System:        req.System,
		Messages:      messages(req.Messages),
		Temperature:   p.Temperature,
		TopP:          p.TopP,
		StopSequences: p.StopSequences,
		Stream:        true,
	}
	if p.MaxTokens > 0 {
		body.MaxTokens = p.MaxTokens
	}
	if th := p.Thinking; th != nil {
		budget := th.Budget()
		body.Thinking = &wireThinking{Type: "enabled", BudgetTokens: budget}
		if body.MaxTokens <= budget {
			body.MaxTokens = budget + c.opts.MaxTokens
		}
	} else {
		body.Messages = withoutFinalThinking(body.Messages)
	}
	for _, t := range req.Tools {
		schema := t.InputSchema
		if len(schema) == 0 || !json.Valid(schema) {
			schema = objectSchema
		}
		body.Tools = append(body.Tools, wireTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if !c.opts.NoPromptCache {
		cacheBreakpoints(&body)
	}
	return body
}

// messages maps the runtime context onto Messages API turns:
//
//   - user and tool messages are user turns (tool results become tool_result
//     blocks), assistant messages assistant turns; other roles are skipped;
//   - an assistant message that ended in error or was aborted and has no
//     content is skipped, and so is any message left without content;
//   - empty text blocks are dropped (the API rejects them); thinking blocks
//     with a signature are sent back as they came, thinking text and
//     signature (a signature-only block with its empty text), and
//     redacted_thinking blocks with their data (Data, or Text in histories
//     written before Data), in their place among the turn's blocks; thinking
//     without a signature (another kind's, or cut by a failure) is display
//     only and dropped;
//   - consecutive turns of the same role are merged into one, so that roles
//     alternate as the API requires, with tool_result blocks first in a
//     merged user turn (the API wants them right after the tool_use turn).
func messages(msgs []provider.Message) []wireMessage {
	// At most one turn a message: one allocation, however long the history.
	out := make([]wireMessage, 0, len(msgs))
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

// withoutFinalThinking drops the thinking blocks of a final assistant turn
// (a prefill), which the API refuses while thinking is off ("When thinking
// is disabled, an `assistant` message in the final position cannot contain
// `thinking`"); earlier turns keep theirs, which the API accepts.
func withoutFinalThinking(msgs []wireMessage) []wireMessage {
	n := len(msgs)
	if n == 0 || msgs[n-1].Role != "assistant" {
		return msgs
	}
	var kept []wireBlock
	for _, b := range msgs[n-1].Content {
		if b.Type != "thinking" && b.Type != "redacted_thinking" {
			kept = append(kept, b)
		}
	}
	if len(kept) == 0 {
		return msgs[:n-1]
	}
	msgs[n-1].Content = kept
	return msgs
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
	// At most one block a block: one allocation a message.
	out := make([]wireBlock, 0, len(content))
	for _, b := range content {
		switch b.Type {
		case provider.BlockText:
			if b.Text != "" {
				out = append(out, wireBlock{Type: "text", Text: b.Text})
			}
		case provider.BlockThinking:
			if role == "assistant" && b.Signature != "" {
				text, sig := b.Text, b.Signature
				out = append(out, wireBlock{Type: "thinking", Thinking: &text, Signature: &sig})
			}
		case provider.BlockRedactedThinking:
			data := b.Data
			if data == "" {
				data = b.Text
			}
			if role == "assistant" && data != "" {
				out = append(out, wireBlock{Type: "redacted_thinking", Data: data})
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
