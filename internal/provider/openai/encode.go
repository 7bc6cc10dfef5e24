package openai

import (
	"encoding/json"
	"strconv"

	"github.com/agentd/agentd/internal/jsonenc"
)

// encodeChat is json.Marshal(body), byte for byte, written without
// reflection: a Chat Completions body is encoded on every model call,
// before the request leaves, and encoding/json's reflective encoder, run
// cold between prompts, is tens of µs of that way. Its buffer is taken once,
// at about the body's size (chatSize): an agent's history is re-sent on
// every call. What it does not write itself (a float JSON cannot hold, a
// tool schema that is not JSON, content of another type) it leaves to
// json.Marshal, error and all. TestEncodeChatIsMarshal and FuzzEncodeChat
// hold it to json.Marshal's output.
func encodeChat(body *chatRequest) ([]byte, error) {
	b, ok := appendChat(make([]byte, 0, chatSize(body)), body)
	if !ok {
		return json.Marshal(body)
	}
	return b, nil
}

// chatSize is about the size of body's JSON: its strings and raw JSON
// unescaped, plus room for the names and punctuation around them (text
// that escapes to more makes the buffer grow once more).
func chatSize(body *chatRequest) int {
	n := 256 + len(body.Model) + len(body.ReasoningEffort) + len(body.PromptCacheKey)
	for i := range body.Messages {
		m := &body.Messages[i]
		n += 48 + len(m.Role) + len(m.ToolCallID)
		if s, ok := m.Content.(string); ok {
			n += len(s)
		}
		for j := range m.ToolCalls {
			c := &m.ToolCalls[j]
			n += 64 + len(c.ID) + len(c.Type) + len(c.Function.Name) + len(c.Function.Arguments)
		}
	}
	for i := range body.Tools {
		t := &body.Tools[i]
		n += 80 + len(t.Type) + len(t.Function.Name) + len(t.Function.Description) + len(t.Function.Parameters)
	}
	for _, s := range body.Stop {
		n += 4 + len(s)
	}
	return n
}

// appendChat appends body's JSON to b, its fields in chatRequest's order,
// the empty ones left out as its omitempty tags say; false: json.Marshal's
// to write.
func appendChat(b []byte, body *chatRequest) ([]byte, bool) {
	var ok bool
	b = append(b, `{"model":`...)
	b = jsonenc.AppendString(b, body.Model)
	b = append(b, `,"messages":`...)
	if body.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range body.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendChatMessage(b, &body.Messages[i]); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	if len(body.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i := range body.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			t := &body.Tools[i]
			b = append(b, `{"type":`...)
			b = jsonenc.AppendString(b, t.Type)
			b = append(b, `,"function":{"name":`...)
			b = jsonenc.AppendString(b, t.Function.Name)
			b = jsonenc.AppendStringField(b, "description", t.Function.Description)
			b = append(b, `,"parameters":`...)
			if b, ok = jsonenc.AppendRaw(b, t.Function.Parameters); !ok {
				return b, false
			}
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if body.MaxCompletionTokens != 0 {
		b = append(b, `,"max_completion_tokens":`...)
		b = strconv.AppendInt(b, int64(body.MaxCompletionTokens), 10)
	}
	if b, ok = jsonenc.AppendFloatField(b, "temperature", body.Temperature); !ok {
		return b, false
	}
	if b, ok = jsonenc.AppendFloatField(b, "top_p", body.TopP); !ok {
		return b, false
	}
	b = jsonenc.AppendStringsField(b, "stop", body.Stop)
	b = jsonenc.AppendStringField(b, "reasoning_effort", body.ReasoningEffort)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, body.Stream)
	if o := body.StreamOptions; o != nil {
		b = append(b, `,"stream_options":{"include_usage":`...)
		b = strconv.AppendBool(b, o.IncludeUsage)
		b = append(b, '}')
	}
	b = jsonenc.AppendStringField(b, "prompt_cache_key", body.PromptCacheKey)
	return append(b, '}'), true
}

// appendChatMessage appends one message; false for content that is neither
// a string nor null.
func appendChatMessage(b []byte, m *chatMessage) ([]byte, bool) {
	b = append(b, `{"role":`...)
	b = jsonenc.AppendString(b, m.Role)
	b = append(b, `,"content":`...)
	switch c := m.Content.(type) {
	case nil:
		b = append(b, "null"...)
	case string:
		b = jsonenc.AppendString(b, c)
	default:
		return b, false
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for j := range m.ToolCalls {
			if j > 0 {
				b = append(b, ',')
			}
			c := &m.ToolCalls[j]
			b = append(b, `{"id":`...)
			b = jsonenc.AppendString(b, c.ID)
			b = append(b, `,"type":`...)
			b = jsonenc.AppendString(b, c.Type)
			b = append(b, `,"function":{"name":`...)
			b = jsonenc.AppendString(b, c.Function.Name)
			b = append(b, `,"arguments":`...)
			b = jsonenc.AppendString(b, c.Function.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	return append(jsonenc.AppendStringField(b, "tool_call_id", m.ToolCallID), '}'), true
}

// encodeResponses is encodeChat for a Responses body: json.Marshal(body),
// byte for byte (TestEncodeResponsesIsMarshal, FuzzEncodeResponses), into
// one buffer at about its size (responsesSize), or json.Marshal's when it
// holds what the encoder does not write itself.
func encodeResponses(body *responsesRequest) ([]byte, error) {
	b, ok := appendResponses(make([]byte, 0, responsesSize(body)), body)
	if !ok {
		return json.Marshal(body)
	}
	return b, nil
}

// responsesSize is chatSize for a Responses body.
func responsesSize(body *responsesRequest) int {
	n := 256 + len(body.Model) + len(body.Instructions) + len(body.PreviousResponseID) + len(body.PromptCacheKey)
	for i := range body.Input {
		it := &body.Input[i]
		n += 96 + len(it.Type) + len(it.ID) + len(it.EncryptedContent) + len(it.Role) + len(it.Content) +
			len(it.CallID) + len(it.Name) + len(it.Arguments)
		if it.Output != nil {
			n += len(*it.Output)
		}
		if it.Summary != nil {
			for _, p := range *it.Summary {
				n += 32 + len(p.Type) + len(p.Text)
			}
		}
	}
	for i := range body.Tools {
		t := &body.Tools[i]
		n += 80 + len(t.Type) + len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	for _, s := range body.Include {
		n += 4 + len(s)
	}
	return n
}

// appendResponses appends body's JSON to b, its fields in
// responsesRequest's order, the empty ones left out as its omitempty tags
// say; false: json.Marshal's to write.
func appendResponses(b []byte, body *responsesRequest) ([]byte, bool) {
	var ok bool
	b = append(b, `{"model":`...)
	b = jsonenc.AppendString(b, body.Model)
	b = jsonenc.AppendStringField(b, "instructions", body.Instructions)
	b = append(b, `,"input":`...)
	if body.Input == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range body.Input {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendInputItem(b, &body.Input[i])
		}
		b = append(b, ']')
	}
	if len(body.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i := range body.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			t := &body.Tools[i]
			b = append(b, `{"type":`...)
			b = jsonenc.AppendString(b, t.Type)
			b = append(b, `,"name":`...)
			b = jsonenc.AppendString(b, t.Name)
			b = jsonenc.AppendStringField(b, "description", t.Description)
			b = append(b, `,"parameters":`...)
			if b, ok = jsonenc.AppendRaw(b, t.Parameters); !ok {
				return b, false
			}
			b = append(b, `,"strict":`...)
			b = strconv.AppendBool(b, t.Strict)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if body.MaxOutputTokens != 0 {
		b = append(b, `,"max_output_tokens":`...)
		b = strconv.AppendInt(b, int64(body.MaxOutputTokens), 10)
	}
	if b, ok = jsonenc.AppendFloatField(b, "temperature", body.Temperature); !ok {
		return b, false
	}
	if b, ok = jsonenc.AppendFloatField(b, "top_p", body.TopP); !ok {
		return b, false
	}
	if r := body.Reasoning; r != nil {
		b = append(b, `,"reasoning":{"effort":`...)
		b = jsonenc.AppendString(b, r.Effort)
		b = append(b, `,"summary":`...)
		b = jsonenc.AppendString(b, r.Summary)
		b = append(b, '}')
	}
	b = jsonenc.AppendStringsField(b, "include", body.Include)
	b = jsonenc.AppendStringField(b, "previous_response_id", body.PreviousResponseID)
	b = append(b, `,"store":`...)
	b = strconv.AppendBool(b, body.Store)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, body.Stream)
	b = jsonenc.AppendStringField(b, "prompt_cache_key", body.PromptCacheKey)
	return append(b, '}'), true
}

// appendInputItem appends one input item, its fields in inputItem's order.
func appendInputItem(b []byte, it *inputItem) []byte {
	b = append(b, `{"type":`...)
	b = jsonenc.AppendString(b, it.Type)
	b = jsonenc.AppendStringField(b, "id", it.ID)
	if it.Summary != nil {
		b = append(b, `,"summary":`...)
		if parts := *it.Summary; parts == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for i, p := range parts {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"type":`...)
				b = jsonenc.AppendString(b, p.Type)
				b = append(b, `,"text":`...)
				b = jsonenc.AppendString(b, p.Text)
				b = append(b, '}')
			}
			b = append(b, ']')
		}
	}
	b = jsonenc.AppendStringField(b, "encrypted_content", it.EncryptedContent)
	b = jsonenc.AppendStringField(b, "role", it.Role)
	b = jsonenc.AppendStringField(b, "content", it.Content)
	b = jsonenc.AppendStringField(b, "call_id", it.CallID)
	b = jsonenc.AppendStringField(b, "name", it.Name)
	b = jsonenc.AppendStringField(b, "arguments", it.Arguments)
	if it.Output != nil {
		b = append(b, `,"output":`...)
		b = jsonenc.AppendString(b, *it.Output)
	}
	return append(b, '}')
}
