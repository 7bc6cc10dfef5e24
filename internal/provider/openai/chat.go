package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// chatRequest is the body of POST /chat/completions.
type chatRequest struct {
	Model               string         `json:"model"`
	Messages            []chatMessage  `json:"messages"`
	Tools               []chatTool     `json:"tools,omitempty"`
	MaxCompletionTokens int            `json:"max_completion_tokens,omitempty"`
	Temperature         *float64       `json:"temperature,omitempty"`
	TopP                *float64       `json:"top_p,omitempty"`
	Stop                []string       `json:"stop,omitempty"`
	ReasoningEffort     string         `json:"reasoning_effort,omitempty"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options,omitempty"`
	PromptCacheKey      string         `json:"prompt_cache_key,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"` // a string, or null beside tool calls
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string      `json:"type"`
	Function chatToolDef `json:"function"`
}

type chatToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

var objectSchema = json.RawMessage(`{"type":"object","properties":{}}`)

// toolSchema is a tool's JSON Schema, or an empty object schema.
func toolSchema(t provider.Tool) json.RawMessage {
	if len(t.InputSchema) == 0 || !json.Valid(t.InputSchema) {
		return objectSchema
	}
	return t.InputSchema
}

// toolArguments is a tool call's input as the arguments string.
func toolArguments(b provider.Block) string {
	if len(b.ToolInput) == 0 || !json.Valid(b.ToolInput) {
		return "{}"
	}
	return string(b.ToolInput)
}

// skipped reports whether a message is left out of every request: an
// assistant message that ended in error or was aborted without content.
func skipped(m provider.Message) bool {
	return m.Role == provider.RoleAssistant && len(m.Content) == 0 &&
		(m.StopReason == provider.StopError || m.StopReason == provider.StopAborted)
}

// chatBody maps a request onto Chat Completions messages: the system prompt
// first; a user message's text (tool results in it become tool messages
// before it); each tool result of a tool message its own tool message; an
// assistant message's text and tool calls (thinking is not sent back).
// Skipped messages (see skipped) and messages left empty are dropped.
// Params: max_completion_tokens, temperature, top_p, stop and
// reasoning_effort (Params.Thinking's effort).
func chatBody(req *provider.Request, noStreamOptions bool) chatRequest {
	p := req.Params
	body := chatRequest{Model: req.Model, Messages: []chatMessage{}, Stream: true,
		MaxCompletionTokens: p.MaxTokens, Temperature: p.Temperature, TopP: p.TopP, Stop: p.StopSequences}
	if p.Thinking != nil {
		body.ReasoningEffort = p.Thinking.Level()
	}
	if !noStreamOptions {
		body.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	if req.System != "" {
		body.Messages = append(body.Messages, chatMessage{Role: "system", Content: req.System})
	}
	for _, m := range req.Messages {
		if skipped(m) {
			continue
		}
		var text strings.Builder
		var calls []chatToolCall
		for _, b := range m.Content {
			switch b.Type {
			case provider.BlockText:
				text.WriteString(b.Text)
			case provider.BlockToolCall:
				if m.Role == provider.RoleAssistant {
					calls = append(calls, chatToolCall{ID: b.ToolCallID, Type: "function",
						Function: chatFunction{Name: b.ToolName, Arguments: toolArguments(b)}})
				}
			case provider.BlockToolResult:
				if m.Role != provider.RoleAssistant {
					body.Messages = append(body.Messages, chatMessage{Role: "tool", ToolCallID: b.ToolCallID, Content: b.Text})
				}
			}
		}
		switch m.Role {
		case provider.RoleUser:
			if text.Len() > 0 {
				body.Messages = append(body.Messages, chatMessage{Role: "user", Content: text.String()})
			}
		case provider.RoleAssistant:
			if text.Len() == 0 && len(calls) == 0 {
				continue
			}
			var content any
			if text.Len() > 0 {
				content = text.String()
			}
			body.Messages = append(body.Messages, chatMessage{Role: "assistant", Content: content, ToolCalls: calls})
		}
	}
	for _, t := range req.Tools {
		body.Tools = append(body.Tools, chatTool{Type: "function",
			Function: chatToolDef{Name: t.Name, Description: t.Description, Parameters: toolSchema(t)}})
	}
	return body
}

func (c *Client) streamChat(ctx context.Context, req *provider.Request, a *wire.Acc) provider.Result {
	body := chatBody(req, c.opts.ChatNoStreamOptions)
	if !c.opts.NoPromptCache {
		body.PromptCacheKey = req.SessionID
	}
	hreq, err := c.newRequest(req, &body)
	if err != nil {
		return a.Fail("openai: "+err.Error(), "", nil)
	}
	return wire.Run(ctx, c.client, hreq, c.opts.Timeout, c.opts.ReadTimeout, a, &chatStream{a: a})
}

var _ wire.Handler = (*chatStream)(nil)

// chatStream is the state of one Chat Completions stream.
type chatStream struct {
	a       *wire.Acc
	finish  string // finish_reason, once seen
	refusal strings.Builder
	calls   map[int]chatCall // the current tool call at each index
	n       int              // tool calls seen
	buf     chatBuf          // the fast path's reused slices
}

type chatCall struct{ key, id string }

type chatChunk struct {
	Choices []chatChoice    `json:"choices"`
	Usage   *openAIUsage    `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

type chatChoice struct {
	Delta        chatDelta `json:"delta"`
	FinishReason string    `json:"finish_reason"`
}

type chatDelta struct {
	Content          string              `json:"content"`
	Refusal          string              `json:"refusal"`
	ReasoningContent string              `json:"reasoning_content"` // vLLM, DeepSeek
	Reasoning        string              `json:"reasoning"`         // OpenRouter, Ollama
	ToolCalls        []chatToolCallDelta `json:"tool_calls"`
}

type chatToolCallDelta struct {
	Index    int          `json:"index"`
	ID       string       `json:"id"`
	Function chatFunction `json:"function"`
}

// decodeChatChunk is the reflective decode of any chunk. It is a function
// of its own so that the chunk of the fast path (see chatBuf.decode) stays
// on Handle's stack.
func decodeChatChunk(data []byte) (chatChunk, error) {
	var ch chatChunk
	err := json.Unmarshal(data, &ch)
	return ch, err
}

// Handle implements wire.Handler.
func (s *chatStream) Handle(c *wire.Call, ev wire.Event) (*provider.Result, error) {
	a := s.a
	if string(ev.Data) == "[DONE]" {
		r := s.end(c)
		return &r, nil
	}
	var ch chatChunk
	if !s.buf.decode(ev.Data, &ch) {
		var err error
		if ch, err = decodeChatChunk(ev.Data); err != nil {
			return nil, fmt.Errorf("openai: unreadable chat completion chunk: %v", err)
		}
	}
	if (len(ch.Error) > 0 && string(ch.Error) != "null") || ev.Type == "error" {
		r := a.FailAPI(c, wire.ParseErrorBody(ev.Data))
		return &r, nil
	}
	if ch.Usage != nil {
		a.Usage = ch.Usage.usage()
	}
	if len(ch.Choices) == 0 {
		return nil, nil
	}
	ci := ch.Choices[0]
	d := ci.Delta
	a.AddThinking("thinking", d.ReasoningContent+d.Reasoning)
	a.AddText("text", d.Content)
	s.refusal.WriteString(d.Refusal)
	for _, tc := range d.ToolCalls {
		key := s.toolKey(tc.Index, tc.ID)
		if !a.HasTool(key) {
			id := tc.ID
			if id == "" {
				id = "call_" + strconv.Itoa(tc.Index)
			}
			a.StartTool(key, id, tc.Function.Name)
		}
		a.AddToolArgs(key, tc.Function.Arguments)
	}
	if ci.FinishReason != "" {
		s.finish = ci.FinishReason
		// Every tool call is complete once the choice has finished.
		if err := a.EndTools(); err != nil {
			return nil, fmt.Errorf("openai: %v", err)
		}
	}
	return nil, nil
}

// toolKey names the tool call a tool_calls delta belongs to: the call at
// its index, or a new one when a new id arrives at an index already taken
// (servers that send whole calls without an index).
func (s *chatStream) toolKey(index int, id string) string {
	if s.calls == nil {
		s.calls = map[int]chatCall{}
	}
	cur, ok := s.calls[index]
	if !ok || (id != "" && cur.id != "" && id != cur.id) {
		cur = chatCall{key: fmt.Sprintf("tool:%d:%d", index, s.n), id: id}
		s.n++
		s.calls[index] = cur
	}
	return cur.key
}

// end ends a stream that reached data: [DONE] (or, leniently, the end of
// the body after its finish_reason).
func (s *chatStream) end(c *wire.Call) provider.Result {
	a := s.a
	if err := a.EndTools(); err != nil {
		return a.Fail("openai: "+err.Error(), "", c.Failure())
	}
	switch s.finish {
	case "length":
		return a.Finish(provider.StopLength)
	case "content_filter":
		return a.Fail(`content_filter: the answer was stopped by the provider's content filter (finish_reason "content_filter")`, provider.DetailSensitive, nil)
	case "error":
		return a.Fail(`Provider returned error finish_reason`, "", c.Failure())
	}
	if s.refusal.Len() > 0 {
		return a.Fail("Refusal: "+s.refusal.String(), provider.DetailRefusal, nil)
	}
	if s.finish == "tool_calls" || s.finish == "function_call" || a.HasCompletedTool() {
		return a.Finish(provider.StopToolUse)
	}
	return a.Finish(provider.StopEnd)
}

// Cut implements wire.Handler: it ends a stream that ended before data:
// [DONE]. A body that ended cleanly after the choice's finish_reason is
// accepted (some OpenAI-compatible servers omit [DONE]); anything else is
// an interrupted stream.
func (s *chatStream) Cut(c *wire.Call, err error) provider.Result {
	if err == io.EOF && s.finish != "" {
		return s.end(c)
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return s.a.Fail("stream ended before [DONE]: "+err.Error(), "", c.Failure())
}
