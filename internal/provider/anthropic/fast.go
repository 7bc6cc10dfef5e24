package anthropic

import "github.com/agentd/agentd/internal/provider/internal/wire"

// The JSON names of the fields of event and of its parts: a member named
// like one of them (in any case) is never skipped by the fast path.
var (
	eventFields   = []string{"type", "message", "index", "content_block", "delta", "stop_details", "usage", "error"}
	messageFields = []string{"usage"}
	blockFields   = []string{"type", "text", "thinking", "signature", "data", "id", "name"}
	deltaFields   = []string{"type", "text", "thinking", "signature", "partial_json", "stop_reason", "stop_details"}
	usageFields   = []string{"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"}
)

// eventTypes are the event types the fast path reads, as constants (a
// decoded type allocates nothing).
var eventTypes = []string{"content_block_delta", "content_block_start", "content_block_stop",
	"message_start", "message_delta", "message_stop", "ping"}

// fastEvent decodes a stream event into e, which must be zero, without
// reflection: e ends up exactly as json.Unmarshal would leave it. It reads
// the events of a usual stream — message_start, content_block_start,
// content_block_delta (nearly every event), content_block_stop,
// message_delta, message_stop and ping — with the members event has of
// them; members that event does not have are validated and skipped.
// Anything else (an error event, stop_details, a null where a value is
// read, a key with an escape, a member twice, invalid JSON) it declines,
// reporting false, and the caller decodes the event with json.Unmarshal.
func fastEvent(data []byte, e *event) bool {
	s := wire.NewScanner(data)
	if !s.Byte('{') {
		return false
	}
	seen, ok := s.Object(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "type":
			v, ok := s.RawString()
			if !ok {
				return 0, false
			}
			for _, t := range eventTypes {
				if string(v) == t {
					e.Type = t
					return 1, true
				}
			}
			return 0, false
		case "index":
			e.Index, ok = s.Int()
			return 2, ok
		case "delta":
			return 4, s.Byte('{') && fastDeltaBody(&s, &e.Delta)
		case "content_block":
			return 8, s.Byte('{') && fastBlockBody(&s, e)
		case "message":
			return 16, s.Byte('{') && fastMessageBody(&s, e)
		case "usage":
			u := new(usage)
			if !s.Byte('{') || !fastUsageBody(&s, u) {
				return 0, false
			}
			e.Usage = u
			return 32, true
		default:
			return 0, wire.Ignorable(k, eventFields) && s.Skip()
		}
	})
	return ok && seen&1 != 0 && s.End()
}

// fastDeltaBody reads the members of a content_block_delta's or a
// message_delta's delta, after its '{' (see fastEvent).
func fastDeltaBody(s *wire.Scanner, d *eventDelta) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "type":
			v, ok := s.RawString()
			if !ok {
				return 0, false
			}
			switch string(v) {
			case "text_delta":
				d.Type = "text_delta"
			case "thinking_delta":
				d.Type = "thinking_delta"
			case "input_json_delta":
				d.Type = "input_json_delta"
			case "signature_delta":
				d.Type = "signature_delta"
			default:
				return 0, false
			}
			return 1, true
		case "text":
			d.Text, ok = s.String()
			return 2, ok
		case "thinking":
			d.Thinking, ok = s.String()
			return 4, ok
		case "partial_json":
			d.PartialJSON, ok = s.String()
			return 8, ok
		case "signature":
			d.Signature, ok = s.String()
			return 16, ok
		case "stop_reason":
			d.StopReason, ok = s.StringOrNull()
			return 32, ok
		default:
			return 0, wire.Ignorable(k, deltaFields) && s.Skip()
		}
	})
	return ok
}

// fastBlockBody reads the members of a content_block_start's block, after
// its '{'.
func fastBlockBody(s *wire.Scanner, e *event) bool {
	cb := &e.ContentBlock
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "type":
			cb.Type, ok = s.String()
			return 1, ok
		case "text":
			cb.Text, ok = s.String()
			return 2, ok
		case "thinking":
			cb.Thinking, ok = s.String()
			return 4, ok
		case "signature":
			cb.Signature, ok = s.String()
			return 8, ok
		case "data":
			cb.Data, ok = s.String()
			return 16, ok
		case "id":
			cb.ID, ok = s.String()
			return 32, ok
		case "name":
			cb.Name, ok = s.String()
			return 64, ok
		default:
			return 0, wire.Ignorable(k, blockFields) && s.Skip()
		}
	})
	return ok
}

// fastMessageBody reads the members of a message_start's message, after
// its '{': its usage (the rest is skipped, as event keeps nothing else).
func fastMessageBody(s *wire.Scanner, e *event) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		if string(k) == "usage" {
			return 1, s.Byte('{') && fastUsageBody(s, &e.Message.Usage)
		}
		return 0, wire.Ignorable(k, messageFields) && s.Skip()
	})
	return ok
}

// fastUsageBody reads the members of a usage object, after its '{'.
func fastUsageBody(s *wire.Scanner, u *usage) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var ok bool
		switch string(k) {
		case "input_tokens":
			u.InputTokens, ok = s.Int64()
			return 1, ok
		case "cache_creation_input_tokens":
			u.CacheCreationInputTokens, ok = s.Int64()
			return 2, ok
		case "cache_read_input_tokens":
			u.CacheReadInputTokens, ok = s.Int64()
			return 4, ok
		case "output_tokens":
			u.OutputTokens, ok = s.Int64()
			return 8, ok
		default:
			return 0, wire.Ignorable(k, usageFields) && s.Skip()
		}
	})
	return ok
}
