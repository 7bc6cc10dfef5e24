package server_test

import (
	"fmt"
	"strings"
	"testing"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// A request larger than the provider's rate limit, in each provider's
// wording on its real wire format: one call, no retry, no credential
// switch or block (a sibling is there to take one), no context_overflow;
// the prompt fails with an error that says why.
func TestRequestOverTheRateLimitIsFinal(t *testing.T) {
	for _, tc := range []struct {
		name, kind, model string
		step              providertest.Step
		want              string
	}{
		{"openai", "openai-chat", "gpt-4o", providertest.RawError(429,
			`{"error":{"message":"Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 45411. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
			"Content-Type", "application/json", "retry-after", "1"),
			"request too large for the rate limit: 45411 tokens requested, the limit is 30000 — it can never succeed at this limit (not retried). Original error: "},
		{"groq", "openai-chat", "llama-3.3-70b-versatile", providertest.RawError(413,
			`{"error":{"message":"Request too large for model `+"`llama-3.3-70b-versatile`"+` in organization `+"`org_01hx`"+` service tier `+"`on_demand`"+` on tokens per minute (TPM): Limit 12000, Requested 14137, please reduce your message size and try again.","type":"tokens","code":"rate_limit_exceeded"}}`,
			"Content-Type", "application/json"),
			"request too large for the rate limit: 14137 tokens requested, the limit is 12000 — it can never succeed at this limit (not retried). Original error: "},
		{"anthropic", "anthropic", "claude-sonnet-4-5", providertest.RawError(429,
			`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (7a1b2c3d) of 30,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."}}`,
			"Content-Type", "application/json", "retry-after", "1",
			"anthropic-ratelimit-input-tokens-limit", "30000", "anthropic-ratelimit-input-tokens-remaining", "30000"),
			"the request alone exceeds the rate limit of 30000 input tokens per minute (refused with the bucket full: anthropic-ratelimit-input-tokens-remaining = 30000) — it can never succeed at this limit (not retried). Original error: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := providertest.NewServer(providertest.Options{})
			defer fake.Close()
			base := fake.URL
			if tc.kind != "anthropic" {
				base += "/v1"
			}
			ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 1}
providers:
  - name: up
    kind: %s
    base_url: %s
    credentials: [{id: one, api_key: sk-overlimit-one-0123456789}, {id: two, api_key: sk-overlimit-two-0123456789}]
`, tc.kind, base))
			fake.Enqueue(tc.step)
			ctx := testkit.Context(t)
			sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "up/" + tc.model}))
			evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "a long prompt"})))
			if got := compact(types(evs)); strings.Contains(got, "auto_retry") || strings.Contains(got, "credential_switched") || strings.Contains(got, "context_overflow") {
				t.Fatalf("events: %s", got)
			}
			var end *agentdv1.MessageEnd
			for _, e := range evs {
				if me := e.GetMessageEnd(); me != nil {
					end = me
				}
			}
			if end.GetErrorClass() != "not_retryable" {
				t.Fatalf("message_end = %v", end)
			}
			pe := evs[len(evs)-1].GetPromptEnd()
			if pe.GetOutcome() != "failed" || !strings.HasPrefix(pe.GetError(), tc.want) {
				t.Fatalf("prompt_end error:\n got %q\nwant %q…", pe.GetError(), tc.want)
			}
			if n := len(fake.Requests()); n != 1 {
				t.Fatalf("provider saw %d calls, want 1", n)
			}
			creds := must(ts.creds.ListCredentials(ctx, &agentdv1.ListCredentialsRequest{}))
			if len(creds.GetCredentials()) != 2 {
				t.Fatalf("credentials = %v", creds)
			}
			for _, c := range creds.GetCredentials() {
				if c.GetStatus() != "available" {
					t.Fatalf("credential %s is %s: a request over the limit blocks nothing", c.GetId(), c.GetStatus())
				}
			}
		})
	}
}
