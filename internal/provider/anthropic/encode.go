package anthropic

import (
	"encoding/json"
	"strconv"

	"github.com/agentd/agentd/internal/jsonenc"
)

// encodeRequest is json.Marshal(body), byte for byte, written without
// reflection: the body is encoded on every model call, before the request
// leaves, and encoding/json's reflective encoder, run cold between
// prompts, took about 25 µs of that way. What it does not write itself (a
// float that JSON cannot hold, a raw tool input or schema that is not
// JSON, a system prompt of another type) it leaves to json.Marshal, error
// and all. TestEncodeRequestIsMarshal and FuzzEncodeRequest hold it to
// json.Marshal's output.
//
// The buffer is taken once, at about the body's size (requestSize): an
// agent's history is re-sent on every call, and a buffer that doubled its
// way up from a few hundred bytes allocated and copied about twice the
// body each time.
func encodeRequest(body *messagesRequest) ([]byte, error) {
	b, ok := appendRequest(make([]byte, 0, requestSize(body)), body)
	if !ok {
		return json.Marshal(body)
	}
	return b, nil
}

// requestSize is about the size of body's JSON: its strings and raw JSON
// unescaped, plus room for the names and punctuation around them. Text
// that escapes to more (quotes, control characters, <, >, &) makes the
// buffer grow once more, no harm done.
func requestSize(body *messagesRequest) int {
	n := 192 + len(body.Model)
	switch s := body.System.(type) {
	case string:
		n += len(s)
	case []wireBlock:
		n += blocksSize(s)
	}
	for i := range body.Messages {
		n += 32 + blocksSize(body.Messages[i].Content)
	}
	for i := range body.Tools {
		t := &body.Tools[i]
		n += 80 + len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	for _, s := range body.StopSequences {
		n += 4 + len(s)
	}
	return n
}

// blocksSize is requestSize's part for a list of blocks.
func blocksSize(bs []wireBlock) int {
	n := 2
	for i := range bs {
		b := &bs[i]
		n += 64 + len(b.Type) + len(b.Text) + len(b.Data) + len(b.ID) + len(b.Name) +
			len(b.Input) + len(b.ToolUseID) + len(b.Content)
		if b.Thinking != nil {
			n += 16 + len(*b.Thinking)
		}
		if b.Signature != nil {
			n += 16 + len(*b.Signature)
		}
		if b.CacheControl != nil {
			n += 40
		}
	}
	return n
}

// appendRequest appends body's JSON to b; false: json.Marshal's to write.
func appendRequest(b []byte, body *messagesRequest) ([]byte, bool) {
	b = append(b, `{"model":`...)
	b = jsonenc.AppendString(b, body.Model)
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(body.MaxTokens), 10)
	if body.System != nil {
		b = append(b, `,"system":`...)
		switch s := body.System.(type) {
		case string:
			b = jsonenc.AppendString(b, s)
		case []wireBlock:
			var ok bool
			if b, ok = appendBlocks(b, s); !ok {
				return b, false
			}
		default:
			return b, false
		}
	}
	b = append(b, `,"messages":`...)
	if body.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range body.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"role":`...)
			b = jsonenc.AppendString(b, m.Role)
			b = append(b, `,"content":`...)
			var ok bool
			if b, ok = appendBlocks(b, m.Content); !ok {
				return b, false
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(body.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range body.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = jsonenc.AppendString(b, t.Name)
			b = jsonenc.AppendStringField(b, "description", t.Description)
			b = append(b, `,"input_schema":`...)
			var ok bool
			if b, ok = jsonenc.AppendRaw(b, t.InputSchema); !ok {
				return b, false
			}
			b = appendCache(b, t.CacheControl)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	var ok bool
	if b, ok = jsonenc.AppendFloatField(b, "temperature", body.Temperature); !ok {
		return b, false
	}
	if b, ok = jsonenc.AppendFloatField(b, "top_p", body.TopP); !ok {
		return b, false
	}
	b = jsonenc.AppendStringsField(b, "stop_sequences", body.StopSequences)
	if t := body.Thinking; t != nil {
		b = append(b, `,"thinking":{"type":`...)
		b = jsonenc.AppendString(b, t.Type)
		b = append(b, `,"budget_tokens":`...)
		b = strconv.AppendInt(b, int64(t.BudgetTokens), 10)
		b = append(b, '}')
	}
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, body.Stream)
	return append(b, '}'), true
}

// appendBlocks appends a block list (null when nil, as encoding/json).
func appendBlocks(b []byte, blocks []wireBlock) ([]byte, bool) {
	if blocks == nil {
		return append(b, "null"...), true
	}
	b = append(b, '[')
	for i := range blocks {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendBlock(b, &blocks[i]); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// appendBlock appends one block, its fields in wireBlock's order, the
// empty ones left out as its omitempty tags say.
func appendBlock(b []byte, k *wireBlock) ([]byte, bool) {
	b = append(b, `{"type":`...)
	b = jsonenc.AppendString(b, k.Type)
	b = jsonenc.AppendStringField(b, "text", k.Text)
	if k.Thinking != nil {
		b = append(b, `,"thinking":`...)
		b = jsonenc.AppendString(b, *k.Thinking)
	}
	if k.Signature != nil {
		b = append(b, `,"signature":`...)
		b = jsonenc.AppendString(b, *k.Signature)
	}
	b = jsonenc.AppendStringField(b, "data", k.Data)
	b = jsonenc.AppendStringField(b, "id", k.ID)
	b = jsonenc.AppendStringField(b, "name", k.Name)
	if len(k.Input) > 0 {
		b = append(b, `,"input":`...)
		var ok bool
		if b, ok = jsonenc.AppendRaw(b, k.Input); !ok {
			return b, false
		}
	}
	b = jsonenc.AppendStringField(b, "tool_use_id", k.ToolUseID)
	b = jsonenc.AppendStringField(b, "content", k.Content)
	if k.IsError {
		b = append(b, `,"is_error":true`...)
	}
	b = appendCache(b, k.CacheControl)
	return append(b, '}'), true
}

func appendCache(b []byte, c *cacheControl) []byte {
	if c == nil {
		return b
	}
	b = append(b, `,"cache_control":{"type":`...)
	b = jsonenc.AppendString(b, c.Type)
	return append(b, '}')
}
