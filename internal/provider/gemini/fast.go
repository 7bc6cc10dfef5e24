package gemini

import "github.com/agentd/agentd/internal/provider/internal/wire"

// The fast path below decodes the hot chunks of a stream — nearly every
// chunk: one candidate whose parts are text (or thoughts), with the usage
// so far — without a reflective json.Unmarshal per chunk. It recognises
// exactly those shapes and leaves exactly what json.Unmarshal would;
// anything else (a function call, a null where it expects a value, a key
// with an escape, a member twice, a member named like a field it does not
// read, invalid JSON) it declines by reporting false, and the chunk is
// decoded with json.Unmarshal as before. Members that chunk does not have
// (modelVersion, index, totalTokenCount, promptTokensDetails, …) are
// validated and skipped.

// The JSON names of chunk's fields, level by level: a member named like
// one of them (in any case) is never skipped.
var (
	chunkFields     = []string{"candidates", "promptFeedback", "usageMetadata", "responseId", "error"}
	candidateFields = []string{"content", "finishReason", "finishMessage"}
	contentFields   = []string{"role", "parts"}
	partFields      = []string{"text", "thought", "thoughtSignature", "functionCall", "functionResponse"}
	usageFields     = []string{"promptTokenCount", "candidatesTokenCount", "cachedContentTokenCount",
		"thoughtsTokenCount", "toolUsePromptTokenCount"}
)

// chunkBuf holds the memory a chunk decoded by the fast path points into,
// reused from chunk to chunk (a chunk is done with when Handle returns),
// and the last response id, which every chunk repeats.
type chunkBuf struct {
	candidate [1]candidate
	parts     []part
	usage     usageMetadata
	respID    string
}

// decode decodes a chunk with one candidate (or none) into ch, which must
// be zero (see above).
func (b *chunkBuf) decode(data []byte, ch *chunk) bool {
	s := wire.NewScanner(data)
	if !s.Byte('{') {
		return false
	}
	seen, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "candidates":
			bit = 1
			ok = b.candidates(&s, ch)
		case "usageMetadata":
			bit = 2
			b.usage = usageMetadata{}
			ok = s.Byte('{') && usageBody(&s, &b.usage)
			ch.UsageMetadata = &b.usage
		case "responseId":
			bit = 4
			var id []byte
			if id, ok = s.RawString(); ok {
				if string(id) != b.respID {
					b.respID = string(id)
				}
				ch.ResponseID = b.respID
			}
		default:
			ok = wire.Ignorable(k, chunkFields) && s.Skip()
		}
		return bit, ok
	})
	return ok && seen&1 != 0 && s.End()
}

// candidates reads an array of at most one candidate.
func (b *chunkBuf) candidates(s *wire.Scanner, ch *chunk) bool {
	cs, ok := wire.One(s, &b.candidate, func(c *candidate) bool { return b.candidateBody(s, c) })
	if ok {
		ch.Candidates = cs
	}
	return ok
}

func (b *chunkBuf) candidateBody(s *wire.Scanner, c *candidate) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "content":
			bit = 1
			ok = s.Byte('{') && b.contentBody(s, &c.Content)
		case "finishReason":
			bit = 2
			c.FinishReason, ok = s.String()
		case "finishMessage":
			bit = 4
			c.FinishMessage, ok = s.String()
		default:
			ok = wire.Ignorable(k, candidateFields) && s.Skip()
		}
		return bit, ok
	})
	return ok
}

func (b *chunkBuf) contentBody(s *wire.Scanner, c *content) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "role":
			bit = 1
			var v []byte
			if v, ok = s.RawString(); ok {
				if string(v) == "model" {
					c.Role = "model"
				} else {
					c.Role = string(v)
				}
			}
		case "parts":
			bit = 2
			ok = b.partList(s, c)
		default:
			ok = wire.Ignorable(k, contentFields) && s.Skip()
		}
		return bit, ok
	})
	return ok
}

// partList reads an array of parts with text, thought and
// thoughtSignature members only.
func (b *chunkBuf) partList(s *wire.Scanner, c *content) bool {
	parts, ok := wire.Array(s, &b.parts, func(p *part) bool { return partBody(s, p) })
	if ok {
		c.Parts = parts
	}
	return ok
}

func partBody(s *wire.Scanner, p *part) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "text":
			bit = 1
			p.Text, ok = s.String()
		case "thought":
			bit = 2
			p.Thought, ok = s.Bool()
		case "thoughtSignature":
			bit = 4
			p.ThoughtSignature, ok = s.String()
		default:
			ok = wire.Ignorable(k, partFields) && s.Skip()
		}
		return bit, ok
	})
	return ok
}

func usageBody(s *wire.Scanner, u *usageMetadata) bool {
	_, ok := s.Object(func(k []byte) (uint32, bool) {
		var bit uint32
		var ok bool
		switch string(k) {
		case "promptTokenCount":
			bit = 1
			u.PromptTokenCount, ok = s.Int64()
		case "candidatesTokenCount":
			bit = 2
			u.CandidatesTokenCount, ok = s.Int64()
		case "cachedContentTokenCount":
			bit = 4
			u.CachedContentTokenCount, ok = s.Int64()
		case "thoughtsTokenCount":
			bit = 8
			u.ThoughtsTokenCount, ok = s.Int64()
		case "toolUsePromptTokenCount":
			bit = 16
			u.ToolUsePromptTokenCount, ok = s.Int64()
		default:
			ok = wire.Ignorable(k, usageFields) && s.Skip()
		}
		return bit, ok
	})
	return ok
}
