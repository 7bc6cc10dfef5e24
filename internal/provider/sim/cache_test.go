package sim

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentd/agentd/internal/provider"
)

func assistantMsg(text string) provider.Message {
	return provider.Message{Role: provider.RoleAssistant, Content: []provider.Block{{Type: provider.BlockText, Text: text}}}
}

// An agent loop resends its history: the second turn reads what the first
// sent from the cache; another account (a sibling credential of another
// account) or another model starts cold.
func TestPromptCache(t *testing.T) {
	p := New(Options{})
	team := provider.Credential{ID: "a", Secret: "x", Account: "org-1"}
	first := &provider.Request{SessionID: "s", Model: "echo", System: "be brief", Credential: team,
		Messages: []provider.Message{userMsg("one two three")}}
	res, _ := stream(t.Context(), p, first)
	if want := (provider.Usage{CacheWriteTokens: 2, InputTokens: 3, OutputTokens: 4}); res.Usage != want {
		t.Errorf("first turn: usage %+v, want %+v", res.Usage, want)
	}
	second := *first
	second.Messages = []provider.Message{userMsg("one two three"), res.Message, userMsg("four five")}
	res2, _ := stream(t.Context(), p, &second)
	// Read: "be brief" + "one two three"; written: the answer (4 words); input: "four five".
	if want := (provider.Usage{CacheReadTokens: 5, CacheWriteTokens: 4, InputTokens: 2, OutputTokens: 3}); res2.Usage != want {
		t.Errorf("second turn: usage %+v, want %+v", res2.Usage, want)
	}

	sibling := second
	sibling.Credential = provider.Credential{ID: "b", Secret: "y"} // an account of its own
	res3, _ := stream(t.Context(), p, &sibling)
	if res3.Usage.CacheReadTokens != 0 || res3.Usage.PromptTokens() != 11 {
		t.Errorf("other account: usage %+v, want a cold cache (11 prompt tokens, none read)", res3.Usage)
	}
	sameAccount := second
	sameAccount.Credential = provider.Credential{ID: "c", Secret: "z", Account: "org-1"}
	if res4, _ := stream(t.Context(), p, &sameAccount); res4.Usage.CacheReadTokens != 11 {
		t.Errorf("same account, other key, same request: usage %+v, want all 11 read", res4.Usage)
	}

	off := New(Options{NoPromptCache: true})
	stream(t.Context(), off, first)
	if res, _ := stream(t.Context(), off, first); res.Usage != (provider.Usage{InputTokens: 5, OutputTokens: 4}) {
		t.Errorf("cache off: usage %+v, want all 5 as input", res.Usage)
	}
}

// Many sessions at once share the provider's cache safely.
func TestPromptCacheConcurrent(t *testing.T) {
	p := New(Options{})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			req := &provider.Request{Model: "echo", System: fmt.Sprintf("session %d", i),
				Messages: []provider.Message{userMsg("hello")}}
			var prev int64
			for turn := range 10 {
				res, _ := stream(t.Context(), p, req)
				if got, want := res.Usage.PromptTokens(), inputTokens(req); got != want {
					t.Errorf("turn %d: usage %+v, want %d prompt tokens", turn, res.Usage, want)
				}
				if res.Usage.CacheReadTokens != prev {
					t.Errorf("turn %d: usage %+v, want the previous turn's %d prompt tokens read", turn, res.Usage, prev)
				}
				prev = res.Usage.PromptTokens()
				req.Messages = append(req.Messages, assistantMsg("ok"), userMsg("again"))
			}
		})
	}
	wg.Wait()
}

func TestCountWords(t *testing.T) {
	for _, s := range []string{"", " ", "a", " a b  c ", "\tx\ny\v\fz\r", "héllo wörld", "a\u00a0b", "a\u2003b c", "\u3000", "日本 語"} {
		if got, want := countWords(s), int64(len(strings.Fields(s))); got != want {
			t.Errorf("countWords(%q) = %d, want %d", s, got, want)
		}
	}
}
