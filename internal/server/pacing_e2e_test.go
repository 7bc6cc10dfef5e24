package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// keyOf is the credential key a request carried (either provider's form).
func keyOf(r providertest.Request) string {
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// Pacing, in both header dialects: the first answer shows a bucket at 0
// remaining, so its credential is blocked until the reset (reason paced);
// the calls that follow go to the sibling, and the provider sends no 429.
// With pacing off the session keeps its credential (sticky credentials):
// every call goes to the first key.
func TestPacingFromRateLimitHeaders(t *testing.T) {
	reset := time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name, kind, model string
		headers           []string
	}{
		{"anthropic", "anthropic", "claude-sonnet-4-5", []string{"anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", reset,
			"anthropic-ratelimit-tokens-remaining", "39000", "anthropic-ratelimit-tokens-reset", reset}},
		{"openai", "openai-chat", "gpt-4o", []string{"x-ratelimit-limit-tokens", "30000",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s",
			"x-ratelimit-remaining-requests", "499", "x-ratelimit-reset-requests", "120ms"}},
	} {
		for _, pacing := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pacing=%v", tc.name, pacing), func(t *testing.T) {
				fake := providertest.NewServer(providertest.Options{})
				defer fake.Close()
				base := fake.URL
				if tc.kind != "anthropic" {
					base += "/v1"
				}
				ts := start(t, fmt.Sprintf(`providers:
  - name: up
    kind: %s
    base_url: %s
    pacing: %v
    credentials: [{id: one, api_key: sk-pace-one-0123456789}, {id: two, api_key: sk-pace-two-0123456789}]
`, tc.kind, base, pacing))
				fake.Enqueue(providertest.Step{Headers: header(tc.headers...)})
				ctx := testkit.Context(t)
				sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "up/" + tc.model}))
				for i := range 3 {
					evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: fmt.Sprintf("prompt %d", i)})))
					if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "completed" {
						t.Fatalf("prompt %d: %v (%s)", i, pe, compact(types(evs)))
					}
				}
				var keys []string
				for _, r := range fake.Requests() {
					if r.Step.Status == 429 {
						t.Fatalf("the provider answered a 429")
					}
					keys = append(keys, strings.TrimPrefix(strings.TrimSuffix(keyOf(r), "-0123456789"), "sk-pace-"))
				}
				want := "one,two,two"
				if !pacing {
					// Nothing moves the session off its credential (sticky).
					want = "one,one,one"
				}
				if got := strings.Join(keys, ","); got != want {
					t.Fatalf("keys used: %s, want %s", got, want)
				}
				creds := must(ts.creds.ListCredentials(ctx, &agentdv1.ListCredentialsRequest{}))
				for _, c := range creds.GetCredentials() {
					paced := c.GetId() == "one" && pacing
					if (c.GetStatus() == "blocked") != paced || paced && !strings.HasPrefix(c.GetBlockReason(), "paced: ") {
						t.Fatalf("credential %s: %s %q", c.GetId(), c.GetStatus(), c.GetBlockReason())
					}
				}
				if v := metricValue(t, ts.baseURL, "agentd_rate_limits_avoided_total", `provider="up"`); v != map[bool]float64{true: 1, false: 0}[pacing] {
					t.Fatalf("agentd_rate_limits_avoided_total = %v", v)
				}
			})
		}
	}
}

// A single credential at 0 remaining: the next prompt waits for its reset
// with the usual events, and the provider sees no 429.
func TestPacingWaitsWithoutASibling(t *testing.T) {
	fake := providertest.NewServer(providertest.Options{})
	defer fake.Close()
	ts := start(t, fmt.Sprintf(`providers:
  - name: up
    kind: openai-chat
    base_url: %s/v1
    credentials: [{id: only, api_key: sk-pace-only-0123456789}]
`, fake.URL))
	fake.Enqueue(providertest.Step{Headers: header("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "300ms")})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "up/gpt-4o"}))
	collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "first"})))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "second"})))
	var start *agentdv1.AutoRetryStart
	for _, e := range evs {
		if s := e.GetAutoRetryStart(); s != nil && start == nil {
			start = s
		}
	}
	if start == nil || start.GetErrorClass() != "usage_limit" || start.GetDelaySource() != "sibling" || start.GetDelayMs() > 1300 {
		t.Fatalf("auto_retry_start = %v (%s)", start, compact(types(evs)))
	}
	if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "completed" {
		t.Fatalf("prompt_end = %v", pe)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Fatalf("provider saw %d calls, want 2 (no 429)", n)
	}
}
