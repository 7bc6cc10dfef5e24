package sim

import (
	"hash/fnv"
	"strings"
	"sync"

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
	h := fnv.New64a()
	write := func(s string) {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	write(req.Credential.AccountName())
	write(req.Model)
	write(req.System)
	segments := make([]uint64, 0, len(req.Messages)+1)
	tokens := make([]int64, 0, len(req.Messages)+1)
	segments = append(segments, h.Sum64())
	tokens = append(tokens, int64(len(strings.Fields(req.System))))
	for _, m := range req.Messages {
		write(m.Role)
		var n int64
		for _, b := range m.Content {
			write(b.Type)
			write(b.Text)
			n += int64(len(strings.Fields(b.Text)))
		}
		segments = append(segments, h.Sum64())
		tokens = append(tokens, n)
	}

	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.prefixes == nil || len(pc.prefixes)+len(segments) > maxCachedPrefixes {
		pc.prefixes = make(map[uint64]struct{})
	}
	var u provider.Usage
	last := len(segments) - 1
	hit := true
	for i, sum := range segments {
		_, cached := pc.prefixes[sum]
		hit = hit && cached
		switch {
		case hit:
			u.CacheReadTokens += tokens[i]
		case i < last:
			u.CacheWriteTokens += tokens[i]
		default:
			u.InputTokens += tokens[i]
		}
		pc.prefixes[sum] = struct{}{}
	}
	// The words counted here are the words inputTokens counted.
	if u.PromptTokens() != in {
		return provider.Usage{InputTokens: in}
	}
	return u
}
