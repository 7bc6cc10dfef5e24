package sim

import (
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/agentd/agentd/internal/provider"
)

// maxCachedPrefixes bounds the simulated prompt cache: past it, the cache
// starts over (as a real one evicts).
const maxCachedPrefixes = 1 << 16

// promptCache simulates a provider's prompt cache, one per account and
// model, as the real ones are: a request's prefix that an earlier request
// of the same account and model sent is read from the cache. Safe for
// concurrent use.
type promptCache struct {
	mu       sync.Mutex
	prefixes map[uint64]struct{} // hashes of (account, model, prefix)
}

// usage splits a request's input of in tokens (inputTokens) into cache
// read, cache write and input: the longest prefix of segments (the system
// prompt, then each message) that an earlier request sent is read, the
// rest but the last message is written, the last message is input. Then
// every prefix of this request is cached.
func (pc *promptCache) usage(req *provider.Request, in int64) provider.Usage {
	type segment struct {
		sum    uint64 // hash of the prefix through this segment
		tokens int64
	}
	h := fnvWrite(fnvOffset, req.Credential.AccountName())
	h = fnvWrite(h, req.Model)
	h = fnvWrite(h, req.System)
	segments := make([]segment, 0, len(req.Messages)+1)
	segments = append(segments, segment{h, countWords(req.System)})
	for _, m := range req.Messages {
		h = fnvWrite(h, m.Role)
		var n int64
		for _, b := range m.Content {
			h = fnvWrite(fnvWrite(h, b.Type), b.Text)
			n += countWords(b.Text)
		}
		segments = append(segments, segment{h, n})
	}

	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.prefixes == nil || len(pc.prefixes)+len(segments) > maxCachedPrefixes {
		pc.prefixes = make(map[uint64]struct{})
	}
	var u provider.Usage
	last := len(segments) - 1
	hit := true
	for i, sg := range segments {
		_, cached := pc.prefixes[sg.sum]
		hit = hit && cached
		switch {
		case hit:
			u.CacheReadTokens += sg.tokens
		case i < last:
			u.CacheWriteTokens += sg.tokens
		default:
			u.InputTokens += sg.tokens
		}
		if !cached {
			pc.prefixes[sg.sum] = struct{}{}
		}
	}
	// The words counted here are the words inputTokens counted.
	if u.PromptTokens() != in {
		return provider.Usage{InputTokens: in}
	}
	return u
}

// FNV-1a, 64-bit, over strings without copying them; each string ends
// with a 0 byte so that ("ab", "c") and ("a", "bc") differ.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvWrite(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h * fnvPrime // the 0 byte: h ^ 0 == h
}

// countWords is len(strings.Fields(s)) without the slice (ASCII bytes
// directly, as strings.Fields does).
func countWords(s string) int64 {
	var n int64
	in := false
	for i := 0; i < len(s); {
		c := s[i]
		var space bool
		if c < utf8.RuneSelf {
			space = asciiSpace[c]
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
			i += size
		}
		if !space && !in {
			n++
		}
		in = !space
	}
	return n
}

var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}
