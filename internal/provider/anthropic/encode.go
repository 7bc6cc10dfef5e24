package anthropic

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// encodeRequest is json.Marshal(body), byte for byte, written without
// reflection: the body is encoded on every model call, before the request
// leaves, and encoding/json's reflective encoder, run cold between
// prompts, took about 25 µs of that way. What it does not write itself (a
// float that JSON cannot hold, a raw tool input or schema that is not
// JSON, a system prompt of another type) it leaves to json.Marshal, error
// and all. TestEncodeRequestIsMarshal and FuzzEncodeRequest hold it to
// json.Marshal's output.
func encodeRequest(body *messagesRequest) ([]byte, error) {
	b, ok := appendRequest(make([]byte, 0, 512), body)
	if !ok {
		return json.Marshal(body)
	}
	return b, nil
}

// appendRequest appends body's JSON to b; false: json.Marshal's to write.
func appendRequest(b []byte, body *messagesRequest) ([]byte, bool) {
	b = append(b, `{"model":`...)
	b = appendString(b, body.Model)
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(body.MaxTokens), 10)
	if body.System != nil {
		b = append(b, `,"system":`...)
		switch s := body.System.(type) {
		case string:
			b = appendString(b, s)
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
			b = appendString(b, m.Role)
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
			b = appendString(b, t.Name)
			if t.Description != "" {
				b = append(b, `,"description":`...)
				b = appendString(b, t.Description)
			}
			b = append(b, `,"input_schema":`...)
			var ok bool
			if b, ok = appendRaw(b, t.InputSchema); !ok {
				return b, false
			}
			b = appendCache(b, t.CacheControl)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	var ok bool
	if body.Temperature != nil {
		b = append(b, `,"temperature":`...)
		if b, ok = appendFloat(b, *body.Temperature); !ok {
			return b, false
		}
	}
	if body.TopP != nil {
		b = append(b, `,"top_p":`...)
		if b, ok = appendFloat(b, *body.TopP); !ok {
			return b, false
		}
	}
	if len(body.StopSequences) > 0 {
		b = append(b, `,"stop_sequences":[`...)
		for i, s := range body.StopSequences {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		b = append(b, ']')
	}
	if t := body.Thinking; t != nil {
		b = append(b, `,"thinking":{"type":`...)
		b = appendString(b, t.Type)
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
	b = appendString(b, k.Type)
	if k.Text != "" {
		b = append(b, `,"text":`...)
		b = appendString(b, k.Text)
	}
	if k.Thinking != nil {
		b = append(b, `,"thinking":`...)
		b = appendString(b, *k.Thinking)
	}
	if k.Signature != nil {
		b = append(b, `,"signature":`...)
		b = appendString(b, *k.Signature)
	}
	if k.Data != "" {
		b = append(b, `,"data":`...)
		b = appendString(b, k.Data)
	}
	if k.ID != "" {
		b = append(b, `,"id":`...)
		b = appendString(b, k.ID)
	}
	if k.Name != "" {
		b = append(b, `,"name":`...)
		b = appendString(b, k.Name)
	}
	if len(k.Input) > 0 {
		b = append(b, `,"input":`...)
		var ok bool
		if b, ok = appendRaw(b, k.Input); !ok {
			return b, false
		}
	}
	if k.ToolUseID != "" {
		b = append(b, `,"tool_use_id":`...)
		b = appendString(b, k.ToolUseID)
	}
	if k.Content != "" {
		b = append(b, `,"content":`...)
		b = appendString(b, k.Content)
	}
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
	b = appendString(b, c.Type)
	return append(b, '}')
}

// appendRaw appends raw JSON as encoding/json does a json.RawMessage:
// compacted, with <, >, &, U+2028 and U+2029 escaped; null when empty.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return b, false
	}
	out := bytes.NewBuffer(b)
	json.HTMLEscape(out, c.Bytes())
	return out.Bytes(), true
}

// appendFloat appends f as encoding/json does a float64 (false for NaN
// and the infinities, which it refuses).
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 is written e-9.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

const hexDigits = "0123456789abcdef"

// appendString appends s quoted as json.Marshal quotes it: HTML's <, >
// and & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
