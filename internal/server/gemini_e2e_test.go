package server_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// agentd against a fake speaking the Gemini API: a 429 RESOURCE_EXHAUSTED
// whose only hint is google.rpc.RetryInfo in the body is retried after that
// delay (delay source provider), then a 503 UNAVAILABLE as transient; the
// key never shows in an event.
func TestGeminiRetryInfoEndToEnd(t *testing.T) {
	const key = "AIzaSyTEST0123456789abcdefSECRETkey"
	t.Setenv("AGENTD_TEST_GEMINI_KEY", key)
	fake := providertest.NewServer(providertest.Options{APIKey: key,
		Answer: &providertest.Answer{Text: []string{"Hello", " from ", "Gemini"}}})
	defer fake.Close()
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 10}
providers:
  - name: g
    kind: gemini
    base_url: %s/v1beta
    credentials: [{id: main, api_key_env: AGENTD_TEST_GEMINI_KEY}]
`, fake.URL))
	fake.Enqueue(providertest.RawError(429, providertest.GeminiRetryInfo("0.25s"), "Content-Type", "application/json; charset=UTF-8"),
		providertest.HTTPError(503), providertest.Step{})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "g/gemini-2.5-flash"}))
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
	if len(starts) != 2 || starts[0].GetErrorClass() != "transient" || starts[0].GetDelayMs() != 250 || starts[0].GetDelaySource() != "provider" ||
		starts[1].GetErrorClass() != "transient" {
		t.Fatalf("auto_retry_start = %v (%s)", starts, compact(types(evs)))
	}
	if text != "Hello from Gemini" {
		t.Fatalf("answer = %q", text)
	}
	if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "completed" {
		t.Fatalf("prompt_end = %v", pe)
	}
	for _, r := range fake.Requests() {
		if r.Header.Get("x-goog-api-key") != key || r.Model != "gemini-2.5-flash" {
			t.Fatalf("request %d: model %q, key header %q", r.Index, r.Model, r.Header.Get("x-goog-api-key"))
		}
	}
}

// A QuotaFailure naming a per-day quota blocks the credential until
// midnight Pacific and the session goes on at once with its sibling.
func TestGeminiDailyQuotaBlocksAndSwitchesEndToEnd(t *testing.T) {
	fake := providertest.NewServer(providertest.Options{Answer: &providertest.Answer{Text: []string{"from ", "the sibling"}}})
	defer fake.Close()
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 10}
providers:
  - name: g
    kind: gemini
    base_url: %s
    credentials: [{id: one, api_key: AIzaSyONE0123456789abcdefghijklm}, {id: two, api_key: AIzaSyTWO0123456789abcdefghijklm}]
`, fake.URL))
	fake.Enqueue(providertest.RawError(429, providertest.GeminiDailyQuota, "Content-Type", "application/json; charset=UTF-8"))
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "g/gemini-2.5-pro"}))
	before := time.Now()
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	var sw *agentdv1.CredentialSwitched
	var text string
	var class string
	for _, e := range evs {
		if s := e.GetCredentialSwitched(); s != nil {
			sw = s
		}
		if me := e.GetMessageEnd(); me != nil && me.GetErrorClass() != "" {
			class = me.GetErrorClass()
		}
		text += e.GetMessageUpdate().GetTextDelta()
	}
	if sw == nil || sw.GetFrom() != "one" || sw.GetTo() != "two" || class != "usage_limit" || text != "from the sibling" {
		t.Fatalf("switch %v, class %q, text %q (%s)", sw, class, text, compact(types(evs)))
	}
	reqs := fake.Requests()
	if len(reqs) != 2 || reqs[0].Header.Get("x-goog-api-key") != "AIzaSyONE0123456789abcdefghijklm" || reqs[1].Header.Get("x-goog-api-key") != "AIzaSyTWO0123456789abcdefghijklm" {
		t.Fatalf("provider saw %d requests", len(reqs))
	}
	creds := must(ts.creds.ListCredentials(ctx, &agentdv1.ListCredentialsRequest{}))
	var blocked *agentdv1.Credential
	for _, c := range creds.GetCredentials() {
		if c.GetId() == "one" {
			blocked = c
		}
	}
	if blocked == nil || blocked.GetStatus() != "blocked" {
		t.Fatalf("credentials = %v", creds)
	}
	until := blocked.GetBlockedUntil().AsTime()
	if d := until.Sub(before); d <= 0 || d > 25*time.Hour {
		t.Fatalf("blocked until %v, %v from now", until, d)
	}
	if la, err := time.LoadLocation("America/Los_Angeles"); err == nil {
		if l := until.In(la).Add(2 * time.Second).Truncate(time.Minute); l.Hour() != 0 || l.Minute() != 0 {
			t.Fatalf("blocked until %v, not midnight Pacific", until.In(la))
		}
	}
}

// A Gemini stream that fails after content (a data: {"error"} frame after
// the first text chunk) is not replayed: one call, the prompt fails.
func TestGeminiMidStreamErrorAfterContentEndToEnd(t *testing.T) {
	fake := providertest.NewServer(providertest.Options{Answer: &providertest.Answer{Text: []string{"Hel", "lo"}}})
	defer fake.Close()
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 1}
providers:
  - name: g
    kind: gemini
    base_url: %s
    credentials: [{id: one, api_key: AIzaSyONE0123456789abcdefghijklm}]
`, fake.URL))
	fake.Enqueue(providertest.Step{Kind: providertest.StepErrorEvent, After: 1})
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "g/gemini-2.5-flash"}))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})))
	if got := compact(types(evs)); strings.Contains(got, "auto_retry") {
		t.Fatalf("events: %s", got)
	}
	var end *agentdv1.MessageEnd
	for _, e := range evs {
		if me := e.GetMessageEnd(); me != nil {
			end = me
		}
	}
	if end.GetErrorClass() != "not_retryable" || !strings.Contains(end.GetErrorMessage(), "200 UNAVAILABLE: The model is overloaded.") {
		t.Fatalf("message_end = %v", end)
	}
	if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "failed" {
		t.Fatalf("prompt_end = %v", pe)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Fatalf("provider saw %d calls, want 1", n)
	}
}
