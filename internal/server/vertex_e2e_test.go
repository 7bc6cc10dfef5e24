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

// vertexFakes are a token endpoint and a Gemini fake that takes only the
// tokens it issued; vertexConfig a provider "vx" of kind vertex on them
// whose credentials are service-account keys of the named projects (in
// environment variables, as a deployment would pass them).
func vertexFakes(t *testing.T, answer *providertest.Answer) (*providertest.TokenServer, *providertest.Server) {
	tokens := providertest.NewTokenServer(providertest.TokenOptions{})
	t.Cleanup(tokens.Close)
	api := providertest.NewServer(providertest.Options{Authorize: tokens.Valid, Answer: answer})
	t.Cleanup(api.Close)
	return tokens, api
}

func vertexConfig(t *testing.T, tokens *providertest.TokenServer, api *providertest.Server, projects ...string) string {
	var creds []string
	for i, p := range projects {
		env := fmt.Sprintf("AGENTD_TEST_VERTEX_KEY_%d", i)
		t.Setenv(env, tokens.ServiceAccountKey(p))
		creds = append(creds, fmt.Sprintf("{id: %s, api_key_env: %s}", p, env))
	}
	return fmt.Sprintf(`retry: {base_delay_ms: 10}
providers:
  - name: vx
    kind: vertex
    location: us-central1
    base_url: %s
    token_url: %s
    credentials: [%s]
`, api.URL, tokens.TokenURL(), strings.Join(creds, ", "))
}

// noSecrets fails when an event carries a token or a piece of the key.
func noSecrets(t *testing.T, evs []*agentdv1.Event) {
	t.Helper()
	for _, e := range evs {
		var buf bytes.Buffer
		fmt.Fprint(&buf, e)
		s := buf.String()
		if strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "ya29.") {
			t.Fatalf("a key or token leaked into an event: %v", e)
		}
	}
}

// agentd on Vertex AI: the access token of the service-account key is
// fetched once and reused; a 429 RESOURCE_EXHAUSTED whose RetryInfo asks
// for 250 ms is retried after it, a 503 as transient; the calls go to the
// key's project.
func TestVertexRetryInfoEndToEnd(t *testing.T) {
	tokens, api := vertexFakes(t, &providertest.Answer{Text: []string{"Hello", " from ", "Vertex"}})
	ts := start(t, vertexConfig(t, tokens, api, "proj-one"))
	api.Enqueue(providertest.RawError(429, providertest.GeminiRetryInfo("0.25s"), "Content-Type", "application/json; charset=UTF-8"),
		providertest.HTTPError(503), providertest.Step{})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "vx/gemini-2.5-flash"}))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	noSecrets(t, evs)
	var starts []*agentdv1.AutoRetryStart
	var text string
	for _, e := range evs {
		if st := e.GetAutoRetryStart(); st != nil {
			starts = append(starts, st)
		}
		text += e.GetMessageUpdate().GetTextDelta()
	}
	if len(starts) != 2 || starts[0].GetErrorClass() != "transient" || starts[0].GetDelayMs() != 250 || starts[0].GetDelaySource() != "provider" ||
		starts[1].GetErrorClass() != "transient" || text != "Hello from Vertex" {
		t.Fatalf("auto_retry_start = %v, text %q (%s)", starts, text, compact(types(evs)))
	}
	if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "completed" {
		t.Fatalf("prompt_end = %v", pe)
	}
	if n := len(tokens.Requests()); n != 1 {
		t.Fatalf("%d token requests for 3 calls, want 1", n)
	}
	for _, r := range api.Requests() {
		if r.Path != "/v1/projects/proj-one/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent" ||
			r.Header.Get("Authorization") != "Bearer "+providertest.TokenN(1) {
			t.Fatalf("request %d: %s, %q", r.Index, r.Path, r.Header.Get("Authorization"))
		}
	}
}

// A per-day QuotaFailure blocks the key and the session goes on at once
// with its sibling, a key of another project with a token of its own.
func TestVertexDailyQuotaSwitchesKeyEndToEnd(t *testing.T) {
	tokens, api := vertexFakes(t, &providertest.Answer{Text: []string{"from ", "the sibling"}})
	ts := start(t, vertexConfig(t, tokens, api, "proj-one", "proj-two"))
	api.Enqueue(providertest.RawError(429, providertest.GeminiDailyQuota, "Content-Type", "application/json; charset=UTF-8"))
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "vx/gemini-2.5-pro"}))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	noSecrets(t, evs)
	var sw *agentdv1.CredentialSwitched
	var text, class string
	for _, e := range evs {
		if s := e.GetCredentialSwitched(); s != nil {
			sw = s
		}
		if me := e.GetMessageEnd(); me != nil && me.GetErrorClass() != "" {
			class = me.GetErrorClass()
		}
		text += e.GetMessageUpdate().GetTextDelta()
	}
	if sw == nil || sw.GetFrom() != "proj-one" || sw.GetTo() != "proj-two" || class != "usage_limit" || text != "from the sibling" {
		t.Fatalf("switch %v, class %q, text %q (%s)", sw, class, text, compact(types(evs)))
	}
	reqs := api.Requests()
	if len(reqs) != 2 || !strings.Contains(reqs[0].Path, "/projects/proj-one/") || !strings.Contains(reqs[1].Path, "/projects/proj-two/") ||
		reqs[0].Header.Get("Authorization") == reqs[1].Header.Get("Authorization") {
		t.Fatalf("requests: %d", len(reqs))
	}
	if n := len(tokens.Requests()); n != 2 {
		t.Fatalf("%d token requests, want one per key", n)
	}
}

// A token endpoint's 503 is retried like any transient failure; a key it
// refuses (invalid_grant) fails the prompt at once, not retried, with no
// model call and nothing of the key in the events.
func TestVertexTokenFailuresEndToEnd(t *testing.T) {
	tokens, api := vertexFakes(t, &providertest.Answer{Text: []string{"ok"}})
	ts := start(t, vertexConfig(t, tokens, api, "proj-one"))
	tokens.Enqueue(providertest.TokenStep{Status: 503, Body: providertest.GoogleBackendError})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "vx/gemini-2.5-flash"}))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	noSecrets(t, evs)
	var starts []*agentdv1.AutoRetryStart
	for _, e := range evs {
		if st := e.GetAutoRetryStart(); st != nil {
			starts = append(starts, st)
		}
	}
	if len(starts) != 1 || starts[0].GetErrorClass() != "transient" || !strings.Contains(starts[0].GetErrorMessage(), "token endpoint failed: 503") ||
		evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("token 503: %v (%s)", starts, compact(types(evs)))
	}

	// A key the token endpoint refuses (on an agentd of its own, whose
	// token cache is empty).
	tokens2, api2 := vertexFakes(t, nil)
	ts2 := start(t, vertexConfig(t, tokens2, api2, "proj-two"))
	tokens2.Enqueue(providertest.TokenStep{Status: 400, Body: providertest.GoogleInvalidGrant})
	sess2 := must(ts2.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "vx/gemini-2.5-flash"}))
	evs = collect(t, must(ts2.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess2.GetId(), Text: "hi"})))
	noSecrets(t, evs)
	var end *agentdv1.MessageEnd
	for _, e := range evs {
		if me := e.GetMessageEnd(); me != nil {
			end = me
		}
	}
	if got := compact(types(evs)); strings.Contains(got, "auto_retry") || end.GetErrorClass() != "not_retryable" ||
		!strings.Contains(end.GetErrorMessage(), "the token endpoint refused the credential: 400 invalid_grant: Invalid JWT Signature.") {
		t.Fatalf("invalid_grant: %v (%s)", end, got)
	}
	if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "failed" {
		t.Fatalf("prompt_end = %v", pe)
	}
	if n := len(api2.Requests()); n != 0 {
		t.Fatalf("%d model calls", n)
	}
}

// A mid-stream error after content is not replayed.
func TestVertexMidStreamErrorAfterContentEndToEnd(t *testing.T) {
	tokens, api := vertexFakes(t, &providertest.Answer{Text: []string{"Hel", "lo"}})
	ts := start(t, vertexConfig(t, tokens, api, "proj-one"))
	api.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, After: 1})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "vx/gemini-2.5-flash"}))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	if got := compact(types(evs)); strings.Contains(got, "auto_retry") || evs[len(evs)-1].GetPromptEnd().GetOutcome() != "failed" {
		t.Fatalf("events: %s", got)
	}
	if n := len(api.Requests()); n != 1 {
		t.Fatalf("provider saw %d calls, want 1", n)
	}
}

// A fallback across kinds, Anthropic → Vertex AI: the overloaded
// Anthropic model hands the prompt to the chain's Vertex model, which
// answers with its own token.
func TestFallbackAnthropicToVertexEndToEnd(t *testing.T) {
	tokens := providertest.NewTokenServer(providertest.TokenOptions{})
	defer tokens.Close()
	fake := providertest.NewServer(providertest.Options{
		Authorize: func(key string) bool { return key == e2eKeyOne || tokens.Valid(key) },
		Script: func(r *providertest.Request) providertest.Step {
			if r.Kind == "anthropic" {
				return providertest.HTTPError(529)
			}
			return providertest.Step{Answer: &providertest.Answer{Text: []string{"from ", "Vertex"}}}
		},
	})
	defer fake.Close()
	t.Setenv("AGENTD_TEST_VERTEX_KEY", tokens.ServiceAccountKey("proj-fb"))
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 5, max_retries: 2, fallback_chains: {default: [vx/gemini-2.5-flash]}}
providers:
  - name: anth
    kind: anthropic
    base_url: %s
    credentials: [{id: one, api_key: %s}]
  - name: vx
    kind: vertex
    base_url: %s
    token_url: %s
    models: [gemini-2.5-flash]
    credentials: [{id: sa, api_key_env: AGENTD_TEST_VERTEX_KEY}]
`, fake.URL, e2eKeyOne, fake.URL, tokens.TokenURL()))
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "anth/claude-sonnet-4-5"}))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	var fb *agentdv1.RetryFallbackApplied
	var text string
	for _, e := range evs {
		if f := e.GetRetryFallbackApplied(); f != nil {
			fb = f
		}
		text += e.GetMessageUpdate().GetTextDelta()
	}
	if fb == nil || fb.GetTo() != "vx/gemini-2.5-flash" || text != "from Vertex" || evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("fallback %v, text %q (%s)", fb, text, compact(types(evs)))
	}
	reqs := fake.Requests()
	last := reqs[len(reqs)-1]
	if last.Kind != "gemini" || last.Path != "/v1/projects/proj-fb/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent" ||
		last.Header.Get("Authorization") != "Bearer "+providertest.TokenN(1) {
		t.Fatalf("last request: %s %s %v", last.Kind, last.Path, last.Header)
	}
}
