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

// agentd on Azure OpenAI's Responses API with Entra ID: one client-
// credentials token for the prompt's calls, a 429 with retry-after-ms
// retried after its hint, requests to /openai/responses with the
// api-version and the deployment as the model, and neither the client
// secret nor the token in an event.
func TestAzureEntraIDResponsesEndToEnd(t *testing.T) {
	const tenant, client, secret = "72f988bf-86f1-41af-91ab-2d7cd011db47", "00000000-0000-0000-0000-00000000c11e", "Xq8Q~SECRETclientvalue.abcdef"
	tokens := providertest.NewTokenServer(providertest.TokenOptions{ClientID: client, ClientSecret: secret,
		Scope: "https://cognitiveservices.azure.com/.default"})
	defer tokens.Close()
	fake := providertest.NewServer(providertest.Options{Authorize: tokens.Valid,
		Answer: &providertest.Answer{Text: []string{"Hello", " from ", "Azure"}}})
	defer fake.Close()
	t.Setenv("AGENTD_TEST_ENTRA", tenant+":"+client+":"+secret)
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 10}
providers:
  - name: az
    kind: azure-openai
    api: responses
    entra_id: true
    base_url: %s
    token_url: %s/{tenant}/oauth2/v2.0/token
    models: [{name: gpt-5-prod}]
    credentials: [{id: sp, api_key_env: AGENTD_TEST_ENTRA}]
`, fake.URL, tokens.URL))
	fake.Enqueue(providertest.RawError(429, providertest.AzureRateLimit, "retry-after-ms", "150"), providertest.Step{})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "az/gpt-5-prod"}))
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
		if s := buf.String(); strings.Contains(s, "SECRET") || strings.Contains(s, "ya29.") {
			t.Fatalf("a secret leaked into an event: %v", e)
		}
	}
	if len(starts) != 1 || starts[0].GetDelayMs() != 150 || starts[0].GetDelaySource() != "provider" || text != "Hello from Azure" {
		t.Fatalf("auto_retry_start = %v, text %q (%s)", starts, text, compact(types(evs)))
	}
	if n := len(tokens.Requests()); n != 1 {
		t.Fatalf("%d token requests, want 1", n)
	}
	for _, r := range fake.Requests() {
		if r.Path != "/openai/responses" || r.Query != "api-version=2025-04-01-preview" || r.Model != "gpt-5-prod" ||
			r.Header.Get("Authorization") != "Bearer "+providertest.TokenN(1) || r.Header.Get("api-key") != "" {
			t.Fatalf("request %d: %s?%s model %q %v", r.Index, r.Path, r.Query, r.Model, r.Header)
		}
	}

	// A client secret Entra ID refuses fails the next prompt, not retried.
	tokens.Expire()
	t.Setenv("AGENTD_TEST_ENTRA_BAD", tenant+":"+client+":wrong-SECRET-value")
	ts2 := start(t, fmt.Sprintf(`providers:
  - name: az
    kind: azure-openai
    entra_id: true
    base_url: %s
    token_url: %s/{tenant}/oauth2/v2.0/token
    models: [{name: gpt-4o-prod}]
    credentials: [{id: sp, api_key_env: AGENTD_TEST_ENTRA_BAD}]
`, fake.URL, tokens.URL))
	sess2 := must(ts2.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "az/gpt-4o-prod"}))
	evs = collect(t, must(ts2.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess2.GetId(), Text: "hi"})))
	var end *agentdv1.MessageEnd
	for _, e := range evs {
		if me := e.GetMessageEnd(); me != nil {
			end = me
		}
		if strings.Contains(fmt.Sprint(e), "SECRET") {
			t.Fatalf("a secret leaked into an event: %v", e)
		}
	}
	if got := compact(types(evs)); strings.Contains(got, "auto_retry") || end.GetErrorClass() != "not_retryable" ||
		!strings.Contains(end.GetErrorMessage(), "401 invalid_client: AADSTS7000215: Invalid client secret provided.") {
		t.Fatalf("refused secret: %v (%s)", end, got)
	}
	if n := len(fake.Requests()); n != 2 {
		t.Fatalf("%d model calls, want the first prompt's 2", n)
	}
}
