package anthropic

import "github.com/agentd/agentd/internal/provider/internal/wire"

// The JSON names of event's and eventDelta's fields: a member named like
// one of them (in any case) is never skipped by the fast path.
var (
	eventFields = []string{"type", "message", "index", "content_block", "delta", "stop_details", "usage", "error"}
	deltaFields = []string{"type", "text", "thinking", "signature", "partial_json", "stop_reason", "stop_details"}
)

// fastDelta decodes a content_block_delta event — nearly every event of a
// stream — into e, which must be zero, without reflection: e ends up
// exactly as json.Unmarshal would leave it. It reads the type, the index
// and a delta of a known type with string members; members that event
// does not have are validated and skipped. Anything else (another event,
// a null, a key with an escape, a member twice, invalid JSON) it declines,
// reporting false, and the caller decodes the event with json.Unmarshal.
func fastDelta(data []byte, e *event) bool {
	s := wire.NewScanner(data)
	if !s.Byte('{') {
		return false
	}
	seen, ok := s.Object(func(k []byte) (uint32, bool) {
		switch string(k) {
		case "type":
			v, ok := s.RawString()
			if !ok || string(v) != "content_block_delta" {
				return 0, false
			}
			e.Type = "content_block_delta"
			return 1, true
		case "index":
			var ok bool
			e.Index, ok = s.Int()
			return 2, ok
		case "delta":
			return 4, s.Byte('{') && fastDeltaBody(&s, &e.Delta)
		default:
			return 0, wire.Ignorable(k, eventFields) && s.Skip()
		}
	})
	return ok && seen&1 != 0 && s.End()
}

// fastDeltaBody reads the members of a content_block_delta's delta, after
// its '{' (see fastDelta).
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
		default:
			return 0, wire.Ignorable(k, deltaFields) && s.Skip()
		}
	})
	return ok
}
