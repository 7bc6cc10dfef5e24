package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// A fallback across kinds, Anthropic → Gemini, in the middle of a tool
// loop with thinking: the session's history (the user's text, Anthropic's
// signed thinking and tool call, the tool's result) maps onto Gemini's
// contents — no Anthropic signature, the call as a functionCall, the
// result as a functionResponse named after it — and Gemini's own thought
// signature goes back to Gemini on its call. Every Gemini call is accepted.
func TestFallbackAnthropicToGeminiOverREST(t *testing.T) {
	const gemKey = "AIzaSyE2E0123456789abcdefghijklmn"
	fake := providertest.NewServer(providertest.Options{
		Script: func(r *providertest.Request) providertest.Step {
			switch {
			case r.Kind == "anthropic" && r.Index == 0:
				return providertest.Step{Answer: &providertest.Answer{Thinking: []string{"Anthropic thinks."},
					Tools: []providertest.ToolCall{{Name: "get_weather", Args: []string{`{"city":"Paris"}`}}}}}
			case r.Kind == "anthropic":
				return providertest.HTTPError(529)
			case bytes.Count(r.Body, []byte(`"functionResponse"`)) < 2:
				return providertest.Step{Answer: &providertest.Answer{Thinking: []string{"Gemini thinks."},
					Tools: []providertest.ToolCall{{Name: "get_weather", Args: []string{`{"city":"Lyon"}`}}}}}
			}
			return providertest.Step{Answer: &providertest.Answer{Text: []string{"Sunny in both."}}}
		},
	})
	defer fake.Close()
	ts := start(t, fmt.Sprintf(`retry: {base_delay_ms: 10, fallback_chains: {default: [gem/gemini-2.5-flash]}}
providers:
  - name: anth
    kind: anthropic
    base_url: %s
    credentials: [{id: one, api_key: %s}]
  - name: gem
    kind: gemini
    base_url: %s/v1beta
    models: [gemini-2.5-flash]
    credentials: [{id: g, api_key: %s}]
`, fake.URL, e2eKeyOne, fake.URL, gemKey))
	id := createREST(t, testkit.Context(t), ts.baseURL, thinkingSession, nil)
	frames, raw := ssePrompt(t, ts, id, `{"text":"weather in Paris?"}`)
	if outcome(frames) != "completed" {
		t.Fatalf("outcome = %s", outcome(frames))
	}
	if fa := framesOf(frames, "retry_fallback_applied"); len(fa) != 1 || fa[0]["to"] != "gem/gemini-2.5-flash" {
		t.Fatalf("retry_fallback_applied = %v", fa)
	}
	reqs := fake.Requests()
	if len(reqs) != 4 || reqs[2].Kind != "gemini" || reqs[3].Kind != "gemini" {
		t.Fatalf("%d requests", len(reqs))
	}
	e2eAccepted(t, reqs, 1)
	if strings.Contains(raw, "gemini:") {
		t.Errorf("a thought signature shows in the stream")
	}
	type part struct {
		Text             string `json:"text"`
		Thought          bool   `json:"thought"`
		ThoughtSignature string `json:"thoughtSignature"`
		FunctionCall     *struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"functionCall"`
		FunctionResponse *struct {
			Name     string            `json:"name"`
			Response map[string]string `json:"response"`
		} `json:"functionResponse"`
	}
	var body struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []part `json:"parts"`
		} `json:"contents"`
		GenerationConfig struct {
			ThinkingConfig *struct {
				ThinkingBudget int `json:"thinkingBudget"`
			} `json:"thinkingConfig"`
		} `json:"generationConfig"`
	}
	if err := json.Unmarshal(reqs[2].Body, &body); err != nil {
		t.Fatal(err)
	}
	c := body.Contents
	if len(c) != 3 || c[0].Role != "user" || c[0].Parts[0].Text != "weather in Paris?" || c[1].Role != "model" || c[2].Role != "user" {
		t.Fatalf("contents = %s", reqs[2].Body)
	}
	if p := c[1].Parts; len(p) != 1 || p[0].FunctionCall == nil || p[0].FunctionCall.Name != "get_weather" ||
		string(p[0].FunctionCall.Args) != `{"city":"Paris"}` || p[0].ThoughtSignature != "" || p[0].Thought {
		t.Errorf("Anthropic's turn on Gemini = %s", reqs[2].Body)
	}
	if p := c[2].Parts; len(p) != 1 || p[0].FunctionResponse == nil || p[0].FunctionResponse.Name != "get_weather" ||
		p[0].FunctionResponse.Response["result"] != "sunny" {
		t.Errorf("the tool result on Gemini = %s", reqs[2].Body)
	}
	if bytes.Contains(reqs[2].Body, []byte("Anthropic thinks")) || bytes.Contains(reqs[2].Body, []byte(`"signature"`)) {
		t.Errorf("Anthropic's thinking went to Gemini: %s", reqs[2].Body)
	}
	if tc := body.GenerationConfig.ThinkingConfig; tc == nil || tc.ThinkingBudget != 2048 {
		t.Errorf("thinking on Gemini = %s", reqs[2].Body)
	}
	// Gemini's own signature goes back on its call.
	sig := providertest.GeminiSignature(providertest.DefaultAccount, "gemini-2.5-flash")
	if !bytes.Contains(reqs[3].Body, []byte(`"thoughtSignature":"`+sig+`","functionCall":{"name":"get_weather","args":{"city":"Lyon"}}`)) {
		t.Errorf("Gemini's signature was not sent back on its call: %s", reqs[3].Body)
	}
}
