package server_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// agentd pointed at a local server speaking each provider's real wire
// format: 529, then 429 with retry-after: 1, then a stream. The session's
// events show the two retries and the answer; the key never shows.
func TestRealProviderKindsRetryEndToEnd(t *testing.T) {
	const key = "sk-test-0123456789abcdefSECRET"
	t.Setenv("AGENTD_TEST_PROVIDER_KEY", key)
	for _, tc := range []struct{ kind, model string }{
		{"anthropic", "claude-sonnet-4-5"},
		{"openai-responses", "gpt-5"},
		{"openai-chat", "gpt-5"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			fake := providertest.NewServer(providertest.Options{APIKey: key,
				Answer: &providertest.Answer{Text: []string{"Hello", " from ", tc.kind}}})
			defer fake.Close()
			base := fake.URL
			if tc.kind != "anthropic" {
				base += "/v1"
			}
			ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 10}
providers:
  - name: up
    kind: %s
    base_url: %s
    credentials: [{id: main, api_key_env: AGENTD_TEST_PROVIDER_KEY}]
`, tc.kind, base))
			fake.Enqueue(providertest.HTTPError(529), providertest.HTTPError(429, "retry-after", "1"), providertest.Step{})
			ctx := testkit.Context(t)
			sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "up/" + tc.model}))
			evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))

			var starts []*agentdv1.AutoRetryStart
			var text string
			for _, e := range evs {
				if st := e.GetAutoRetryStart(); st != nil {
					starts = append(starts, st)
				}
				text += e.GetMessageUpdate().GetTextDelta()
				var buf bytes.Buffer
				fmt.Fprint(&buf, e)
				if strings.Contains(buf.String(), "SECRET") {
					t.Fatalf("the key leaked into an event: %v", e)
				}
			}
			if len(starts) != 2 || starts[0].GetErrorClass() != "transient" || starts[1].GetDelayMs() != 1000 || starts[1].GetDelaySource() != "provider" {
				t.Fatalf("auto_retry_start = %v (%s)", starts, compact(types(evs)))
			}
			if text != "Hello from "+tc.kind {
				t.Fatalf("answer = %q", text)
			}
			if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "completed" {
				t.Fatalf("prompt_end = %v", pe)
			}
			reqs := fake.Requests()
			if len(reqs) != 3 || reqs[2].Model != tc.model {
				t.Fatalf("provider saw %d requests", len(reqs))
			}
			msgs := must(ts.agent.ListMessages(ctx, &agentdv1.ListMessagesRequest{SessionId: sess.GetId()}))
			if n := len(msgs.GetMessages()); n != 4 {
				t.Fatalf("history has %d entries, want user, two errors, answer", n)
			}
		})
	}
}
