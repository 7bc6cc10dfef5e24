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
	var seen uint8
	for n := 0; ; n++ {
		k, more, ok := s.Member(n)
		if !ok {
			return false
		}
		if !more {
			break
		}
		var bit uint8
		switch string(k) {
		case "type":
			bit = 1
			v, ok := s.RawString()
			if !ok || string(v) != "content_block_delta" {
				return false
			}
			e.Type = "content_block_delta"
		case "index":
			bit = 2
			if e.Index, ok = s.Int(); !ok {
				return false
			}
		case "delta":
			bit = 4
			if !s.Byte('{') || !fastDeltaBody(&s, &e.Delta) {
				return false
			}
		default:
			if !wire.Ignorable(k, eventFields) || !s.Skip() {
				return false
			}
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return seen&1 != 0 && s.End()
}

// fastDeltaBody reads the members of a content_block_delta's delta, after
// its '{' (see fastDelta).
func fastDeltaBody(s *wire.Scanner, d *eventDelta) bool {
	var seen uint8
	for n := 0; ; n++ {
		k, more, ok := s.Member(n)
		if !ok {
			return false
		}
		if !more {
			return true
		}
		var bit uint8
		switch string(k) {
		case "type":
			bit = 1
			v, ok := s.RawString()
			if !ok {
				return false
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
				return false
			}
		case "text":
			bit = 2
			d.Text, ok = s.String()
		case "thinking":
			bit = 4
			d.Thinking, ok = s.String()
		case "partial_json":
			bit = 8
			d.PartialJSON, ok = s.String()
		case "signature":
			bit = 16
			d.Signature, ok = s.String()
		default:
			ok = wire.Ignorable(k, deltaFields) && s.Skip()
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
}
