package openai

import (
	"strconv"

	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// The fast paths below decode the hot frames of a stream — nearly every
// frame: a chunk of text, reasoning or tool-call arguments — without a
// reflective json.Unmarshal per frame. Each recognises exactly the shapes
// it names and leaves exactly what json.Unmarshal would; anything else (a
// null where it expects a value, a key with an escape, a member twice, a
// member named like a field it does not read, invalid JSON) it declines
// by reporting false, and the frame is decoded with json.Unmarshal as
// before. Members that the decoded struct does not have (id, model,
// logprobs, obfuscation, sequence_number, …) are validated and skipped.

// The JSON names of the Chat Completions chunk's fields, level by level: a
// member named like one of them (in any case) is never skipped.
var (
	chunkFields    = []string{"choices", "usage", "error"}
	choiceFields   = []string{"delta", "finish_reason"}
	deltaFields    = []string{"content", "refusal", "reasoning_content", "reasoning", "tool_calls"}
	toolCallFields = []string{"index", "id", "function"}
	functionFields = []string{"name", "arguments"}
)

// chatBuf holds the slices a chat chunk decoded by the fast path points
// into, reused from chunk to chunk: a chunk is done with when Handle
// returns.
type chatBuf struct {
	choice [1]chatChoice
	calls  []chatToolCallDelta
}

// decode decodes a chunk with one choice (or none) and "usage": null or
// no usage into ch, which must be zero (see the fast paths above).
func (b *chatBuf) decode(data []byte, ch *chatChunk) bool {
	s := wire.NewScanner(data)
	if !s.Byte('{') {
		return false
	}
	seen, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "choices":
			bit = 1
			ok = b.choices(&s, ch)
		case "usage":
			bit = 2
			ok = s.Null() // ch.Usage stays nil
		default:
			ok = wire.Ignorable(k, chunkFields) && s.Skip()
		}
		return bit, ok
	})
	return ok && seen&1 != 0 && s.End()
}

// choices reads an array of at most one choice.
func (b *chatBuf) choices(s *wire.Scanner, ch *chatChunk) bool {
	cs, ok := wire.One(s, &b.choice, func(c *chatChoice) bool { return b.choiceBody(s, c) })
	if ok {
		ch.Choices = cs
	}
	return ok
}

func (b *chatBuf) choiceBody(s *wire.Scanner, c *chatChoice) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "delta":
			bit = 1
			ok = s.Byte('{') && b.deltaBody(s, &c.Delta)
		case "finish_reason":
			bit = 2
			c.FinishReason, ok = s.StringOrNull()
		default:
			ok = wire.Ignorable(k, choiceFields) && s.Skip()
		}
		return bit, ok
	})
	return ok
}

func (b *chatBuf) deltaBody(s *wire.Scanner, d *chatDelta) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "content":
			bit = 1
			d.Content, ok = s.StringOrNull()
		case "refusal":
			bit = 2
			d.Refusal, ok = s.StringOrNull()
		case "reasoning_content":
			bit = 4
			d.ReasoningContent, ok = s.StringOrNull()
		case "reasoning":
			bit = 8
			d.Reasoning, ok = s.StringOrNull()
		case "tool_calls":
			bit = 16
			ok = b.toolCalls(s, d)
		default:
			ok = wire.Ignorable(k, deltaFields) && s.Skip()
		}
		return bit, ok
	})
	return ok
}

// toolCalls reads a delta's tool_calls: null (nil) or an array.
func (b *chatBuf) toolCalls(s *wire.Scanner, d *chatDelta) bool {
	if s.Null() {
		return true
	}
	calls, ok := wire.Array(s, &b.calls, func(tc *chatToolCallDelta) bool { return toolCallBody(s, tc) })
	if ok {
		d.ToolCalls = calls
	}
	return ok
}

func toolCallBody(s *wire.Scanner, tc *chatToolCallDelta) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "index":
			bit = 1
			tc.Index, ok = s.Int()
		case "id":
			bit = 2
			tc.ID, ok = s.StringOrNull()
		case "function":
			bit = 4
			ok = s.Byte('{') && functionBody(s, &tc.Function)
		default:
			ok = wire.Ignorable(k, toolCallFields) && s.Skip()
		}
		return bit, ok
	})
	return ok
}

func functionBody(s *wire.Scanner, f *chatFunction) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "name":
			bit = 1
			f.Name, ok = s.StringOrNull()
		case "arguments":
			bit = 2
			f.Arguments, ok = s.StringOrNull()
		default:
			ok = wire.Ignorable(k, functionFields) && s.Skip()
		}
		return bit, ok
	})
	return ok
}

// responsesEventFields are the JSON names of responsesEvent's fields.
var responsesEventFields = []string{"type", "response", "item_id", "output_index", "content_index",
	"summary_index", "delta", "arguments", "item", "code", "message", "error"}

// responsesDelta is a Responses delta event as the fast path reads it:
// what json.Unmarshal would leave in a responsesEvent, with the item id
// raw (a slice of the frame: it is compared, and copied only when a new
// item starts) and the delta decoded.
type responsesDelta struct {
	Type                                    string
	ItemID                                  []byte
	OutputIndex, ContentIndex, SummaryIndex int
	Delta                                   string
}

// fastResponsesDelta decodes a delta event of a kind handleDelta knows:
// response.output_text.delta, response.refusal.delta,
// response.reasoning_summary_text.delta, response.reasoning_text.delta and
// response.function_call_arguments.delta, with a string delta (see the
// fast paths above).
func fastResponsesDelta(data []byte, d *responsesDelta) bool {
	s := wire.NewScanner(data)
	if !s.Byte('{') {
		return false
	}
	seen, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "type":
			bit = 1
			var v []byte
			if v, ok = s.RawString(); ok {
				switch string(v) {
				case "response.output_text.delta":
					d.Type = "response.output_text.delta"
				case "response.refusal.delta":
					d.Type = "response.refusal.delta"
				case "response.reasoning_summary_text.delta":
					d.Type = "response.reasoning_summary_text.delta"
				case "response.reasoning_text.delta":
					d.Type = "response.reasoning_text.delta"
				case "response.function_call_arguments.delta":
					d.Type = "response.function_call_arguments.delta"
				default:
					ok = false
				}
			}
		case "item_id":
			bit = 2
			d.ItemID, ok = s.RawString()
		case "output_index":
			bit = 4
			d.OutputIndex, ok = s.Int()
		case "content_index":
			bit = 8
			d.ContentIndex, ok = s.Int()
		case "summary_index":
			bit = 16
			d.SummaryIndex, ok = s.Int()
		case "delta":
			bit = 32
			d.Delta, ok = s.String()
		default:
			ok = wire.Ignorable(k, responsesEventFields) && s.Skip()
		}
		return bit, ok
	})
	return ok && seen&1 != 0 && s.End()
}

// handleDelta is Handle for an event fastResponsesDelta read: what Handle
// does for its type, with the block keys kept from the event before while
// the item and the content index stay the same.
func (s *responsesStream) handleDelta(d *responsesDelta) {
	key := s.itemKey(d.ItemID, d.OutputIndex)
	switch d.Type {
	case "response.output_text.delta":
		if key != s.textItem || d.ContentIndex != s.textIndex || s.textKey == "" {
			s.textItem, s.textIndex = key, d.ContentIndex
			s.textKey = key + "/text/" + strconv.Itoa(d.ContentIndex)
		}
		s.a.AddText(s.textKey, d.Delta)
	case "response.refusal.delta":
		s.refusal.WriteString(d.Delta)
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		s.a.AddThinking(key, d.Delta)
	case "response.function_call_arguments.delta":
		s.a.AddToolArgs(key, d.Delta)
	}
}

// itemKey is itemKey(string(id), outputIndex), without a copy of id while
// it names the same item as the event before.
func (s *responsesStream) itemKey(id []byte, outputIndex int) string {
	if len(id) == 0 {
		return itemKey("", outputIndex)
	}
	if string(id) != s.lastItem {
		s.lastItem = string(id)
	}
	return s.lastItem
}
