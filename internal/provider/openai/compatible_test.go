package openai

import (
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/testkit"
)

// OpenAI-compatible servers (OpenRouter, vLLM, Ollama) on the Chat API:
// errors inside 200 answers and streams, OpenRouter's metadata.raw, 402
// for credits and local servers' loading/busy answers, each with the
// retry engine's verdict on what the client reported.
func TestCompatibleServerFailures(t *testing.T) {
	chunk := providertest.Frames(provider.KindOpenAIChat, "m", &providertest.Answer{Text: []string{"Hel"}})
	first := chunk[:strings.Index(chunk, "\n\n")+2] // the role chunk
	for _, tc := range []struct {
		name    string
		step    providertest.Step
		msg     string
		status  int
		class   retry.Class
		details string
	}{
		{"OpenRouter upstream 429 in a 200 JSON body",
			providertest.Step{Kind: providertest.StepHTTPError, Status: 200, Body: providertest.OpenRouterUpstream429},
			`200 429: Provider returned error (Google AI Studio: { "error": { "code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED" } })`,
			200, retry.ClassUsageLimit, ""},
		{"OpenRouter upstream 429 as a 429",
			providertest.RawError(429, providertest.OpenRouterUpstream429),
			`429 429: Provider returned error (Google AI Studio: `, 429, retry.ClassUsageLimit, ""},
		{"OpenRouter 402 credits",
			providertest.RawError(402, providertest.OpenRouterCredits),
			"402 402: Insufficient credits. This account never purchased credits.", 402, retry.ClassNotRetryable, ""},
		{"OpenRouter error chunk mid-stream",
			providertest.Step{Kind: providertest.StepHTTPError, Status: 200, ContentType: "text/event-stream",
				Body: first + providertest.OpenRouterStreamError("m", 502, "Upstream error from Chutes: peer closed connection")},
			"200 502: Upstream error from Chutes: peer closed connection", 200, retry.ClassTransient, ""},
		{"vLLM loading model",
			providertest.RawError(503, "Loading model", "Content-Type", "text/plain"),
			"503 Loading model", 503, retry.ClassTransient, ""},
		{"Ollama busy inside a 200 stream",
			providertest.Step{Kind: providertest.StepHTTPError, Status: 200, ContentType: "text/event-stream",
				Body: first + "data: " + providertest.OllamaBusy + "\n\n"},
			"200 server busy, please try again.  maximum pending requests exceeded", 200, retry.ClassTransient, ""},
		{"overflow inside a 200 stream after content",
			providertest.Step{Kind: providertest.StepErrorEvent, After: 1, ErrorType: "BadRequestError", ErrorCode: "400",
				ErrorMessage: "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens (39000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."},
			"200 BadRequestError: This model's maximum context length is 32768 tokens.", 200, retry.ClassContextOverflow, provider.DetailInterruptedAfterContent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, providertest.Options{Answer: &providertest.Answer{Text: []string{"Hel", "lo"}}})
			s.Enqueue(tc.step)
			c := newClient(t, Options{API: APIChat, BaseURL: s.URL + "/api/v1",
				Headers: map[string]string{"HTTP-Referer": "https://example.com", "X-Title": "agentd test"}})
			res, _ := streamT(t, c, request(userMsg("hi")))
			m, f := res.Message, res.Failure
			if m.StopReason != provider.StopError || !strings.HasPrefix(m.ErrorMessage, tc.msg) || m.StopDetails != tc.details || f == nil || f.Status != tc.status {
				t.Fatalf("result = %+v failure %+v\nwant message %q…", m, f, tc.msg)
			}
			v := retry.Classify(retry.Failure{StopReason: m.StopReason, ErrorMessage: m.ErrorMessage, StopDetails: m.StopDetails,
				API: provider.KindOpenAIChat, Status: f.Status, Headers: f.Headers, ErrorType: f.Type, ErrorCode: f.Code, Body: f.Body,
				ObservableOutput: m.HasObservableOutput()}, time.Now())
			if v.Underlying != tc.class {
				t.Errorf("verdict = %+v, want %s", v, tc.class)
			}
			reqs, err := s.WaitRequests(testkit.Context(t), 1)
			if err != nil {
				t.Fatal(err)
			}
			r := reqs[0]
			if r.Path != "/api/v1/chat/completions" || r.Header.Get("HTTP-Referer") != "https://example.com" || r.Header.Get("X-Title") != "agentd test" ||
				r.Header.Get("Authorization") != "Bearer "+secret {
				t.Errorf("request %s headers %v", r.Path, r.Header)
			}
		})
	}
}
