package openai

import (
	"fmt"
	"testing"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// Both APIs report the cached part inside their prompt tokens and the
// reasoning part inside the output: agentd's input leaves the cached part
// out, so that input + cache read is the whole prompt.
func TestUsageCacheAndReasoning(t *testing.T) {
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			s := newServer(t, providertest.Options{})
			s.Enqueue(providertest.Step{Answer: &providertest.Answer{
				Text: []string{"Hello", "!"}, InputTokens: 120, CacheReadTokens: 3072, OutputTokens: 410, ReasoningTokens: 384,
			}})
			c := newClient(t, Options{API: api, BaseURL: s.URL + "/v1"})
			res, _ := streamT(t, c, request())
			want := provider.Usage{InputTokens: 120, CacheReadTokens: 3072, OutputTokens: 410, ReasoningTokens: 384}
			if res.Usage != want {
				t.Errorf("usage = %+v, want %+v", res.Usage, want)
			}
			if got := res.Usage.PromptTokens(); got != 3192 {
				t.Errorf("prompt tokens = %d, want the wire's 3192", got)
			}
		})
	}
}

// A stream cut after its usage arrived keeps it: the call was billed.
func TestUsageKeptOnFailure(t *testing.T) {
	s := newServer(t, providertest.Options{})
	s.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, After: providertest.AllFrames,
		Answer: &providertest.Answer{Text: []string{"Hi"}, InputTokens: 40, CacheReadTokens: 1024, OutputTokens: 2}})
	c := newClient(t, Options{API: APIChat, BaseURL: s.URL + "/v1"})
	res, _ := streamT(t, c, request())
	if res.Message.StopReason != provider.StopError {
		t.Fatalf("stop = %q, want error", res.Message.StopReason)
	}
	if want := (provider.Usage{InputTokens: 40, CacheReadTokens: 1024, OutputTokens: 2}); res.Usage != want {
		t.Errorf("usage = %+v, want %+v", res.Usage, want)
	}
}

// Every request carries its session's id as prompt_cache_key (both APIs),
// so that a session's calls meet its cached prefix; turned off, none.
func TestPromptCacheKey(t *testing.T) {
	for _, api := range apis {
		for _, off := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/off=%v", api, off), func(t *testing.T) {
				s := newServer(t, providertest.Options{})
				c := newClient(t, Options{API: api, BaseURL: s.URL + "/v1", NoPromptCache: off})
				req := request()
				req.SessionID = "ses_0123"
				for range 2 {
					streamT(t, c, req)
				}
				reqs, err := s.WaitRequests(testkit.Context(t), 2)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range reqs {
					var body map[string]any
					if err := r.JSON(&body); err != nil {
						t.Fatal(err)
					}
					key, has := body["prompt_cache_key"]
					if off && has || !off && key != "ses_0123" {
						t.Errorf("request %d: prompt_cache_key %v (present %v), off %v", i, key, has, off)
					}
				}
			})
		}
	}
}
