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

// agentd against a fake speaking Azure OpenAI: a 429 with retry-after-ms:
// 250 (and a body saying "Please retry after 2 seconds") is retried after
// 250 ms (delay source provider), then one with only x-ms-retry-after-ms;
// every request goes to the deployment's path with the api-version and the
// key in api-key, and the key never shows in an event.
func TestAzureRetryAfterMsEndToEnd(t *testing.T) {
	const key = "azTEST0123456789abcdefSECRETkey"
	t.Setenv("AGENTD_TEST_AZURE_KEY", key)
	fake := providertest.NewServer(providertest.Options{APIKey: key,
		Answer: &providertest.Answer{Text: []string{"Hello", " from ", "Azure"}}})
	defer fake.Close()
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 10}
providers:
  - name: az
    kind: azure-openai
    base_url: %s
    api_version: 2025-04-01-preview
    models: [{name: gpt-4o-prod}]
    credentials: [{id: main, api_key_env: AGENTD_TEST_AZURE_KEY}]
`, fake.URL))
	fake.Enqueue(providertest.RawError(429, providertest.AzureRateLimit, "retry-after", "2", "retry-after-ms", "250"), providertest.Step{},
		providertest.RawError(429, providertest.AzureRateLimit, "x-ms-retry-after-ms", "120"), providertest.Step{})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "az/gpt-4o-prod"}))
	for i, wantMs := range []int64{250, 120} {
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
		if len(starts) != 1 || starts[0].GetErrorClass() != "transient" || starts[0].GetDelayMs() != wantMs || starts[0].GetDelaySource() != "provider" {
			t.Fatalf("prompt %d: auto_retry_start = %v (%s)", i, starts, compact(types(evs)))
		}
		if text != "Hello from Azure" {
			t.Fatalf("prompt %d: answer = %q", i, text)
		}
		if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "completed" {
			t.Fatalf("prompt %d: prompt_end = %v", i, pe)
		}
	}
	reqs := fake.Requests()
	if len(reqs) != 4 {
		t.Fatalf("provider saw %d requests, want 4", len(reqs))
	}
	for _, r := range reqs {
		if r.Path != "/openai/deployments/gpt-4o-prod/chat/completions" || r.Query != "api-version=2025-04-01-preview" ||
			r.Header.Get("api-key") != key || r.Header.Get("Authorization") != "" {
			t.Fatalf("request %d: %s?%s headers %v", r.Index, r.Path, r.Query, r.Header)
		}
	}
}
