package mock

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/anthropic"
	"github.com/agentd/agentd/internal/provider/gemini"
	"github.com/agentd/agentd/internal/provider/openai"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/retry"
)

// start serves a Mock on a loopback port.
func start(t *testing.T, opts Options) (*Mock, string) {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(m)
	srv.Config.ConnState = m.ConnState
	srv.Start()
	t.Cleanup(func() { m.Close(); srv.Close() })
	return m, srv.URL
}

// clients are agentd's own provider clients for the three kinds.
func clients(base string, headers map[string]string) map[string]provider.Provider {
	return map[string]provider.Provider{
		provider.KindAnthropic:       anthropic.New(anthropic.Options{BaseURL: base, Headers: headers}),
		provider.KindOpenAIResponses: openai.New(openai.Options{API: openai.APIResponses, BaseURL: base + "/v1", Headers: headers}),
		provider.KindOpenAIChat:      openai.New(openai.Options{API: openai.APIChat, BaseURL: base + "/v1", Headers: headers}),
	}
}

func call(t *testing.T, p provider.Provider, text string) (provider.Result, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var deltas []string
	res := p.Stream(ctx, &provider.Request{
		Model:      "model-x",
		Messages:   []provider.Message{{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: text}}}},
		Credential: provider.Credential{ID: "k", Secret: "sk-mock"},
	}, func(d provider.Delta) { deltas = append(deltas, d.Text) })
	return res, deltas
}

func classify(kind string, res provider.Result) retry.Verdict {
	f := retry.Failure{StopReason: res.Message.StopReason, ErrorMessage: res.Message.ErrorMessage,
		StopDetails: res.Message.StopDetails, API: kind}
	if res.Failure != nil {
		f.Status, f.Headers, f.ErrorType, f.ErrorCode, f.Body = res.Failure.Status, res.Failure.Headers, res.Failure.Type, res.Failure.Code, res.Failure.Body
	}
	return retry.Classify(f, time.Now())
}

// The prompt's fault script plays per conversation: the n-th request with
// the same text plays the n-th step, on every wire format, and agentd's
// clients and classifier read the faults as they read real providers'.
func TestFaultScriptPerConversation(t *testing.T) {
	_, base := start(t, Options{})
	for kind, p := range clients(base, nil) {
		t.Run(kind, func(t *testing.T) {
			text := "hello " + kind + " [[faults: 529,429:retry-after=2,usage,ok]]"
			res, _ := call(t, p, text)
			if v := classify(kind, res); res.Message.StopReason != provider.StopError || v.Class != retry.ClassTransient {
				t.Fatalf("call 1: %q %q: %s", res.Message.StopReason, res.Message.ErrorMessage, v.Class)
			}
			res, _ = call(t, p, text)
			if v := classify(kind, res); v.Class != retry.ClassTransient || !v.HasHint || v.Hint != 2*time.Second {
				t.Fatalf("call 2: %q: %s hint %v", res.Message.ErrorMessage, v.Class, v.Hint)
			}
			res, _ = call(t, p, text)
			if v := classify(kind, res); v.Class != retry.ClassUsageLimit {
				t.Fatalf("call 3: %q: %s", res.Message.ErrorMessage, v.Class)
			}
			res, deltas := call(t, p, text)
			if res.Message.StopReason != provider.StopEnd || strings.Join(deltas, "") != "echo: hello "+kind {
				t.Fatalf("call 4: %q %q", res.Message.StopReason, strings.Join(deltas, ""))
			}
			// Another text starts its own count.
			if res, _ := call(t, p, "other "+kind+" [[faults: 503,ok]]"); res.Message.StopReason != provider.StopError {
				t.Fatalf("another conversation's first call: %q", res.Message.StopReason)
			}
		})
	}
}

// Headers set the script, length, pacing and stamps; a directive in the
// prompt wins over a header.
func TestHeadersAndDirectives(t *testing.T) {
	m, base := start(t, Options{})
	p := clients(base, map[string]string{HeaderFaults: "500,ok", HeaderTokens: "5", HeaderStamp: "1"})[provider.KindAnthropic]
	res, _ := call(t, p, "via header")
	if res.Failure == nil || res.Failure.Status != 500 {
		t.Fatalf("header script: %+v", res.Message)
	}
	before := time.Now().UnixNano()
	res, deltas := call(t, p, "via header")
	if res.Message.StopReason != provider.StopEnd || len(deltas) != 5 {
		t.Fatalf("answer: %q, %d deltas", res.Message.StopReason, len(deltas))
	}
	var lastWrite int64
	for _, d := range deltas {
		w, a, err := ParseStamp(d)
		if err != nil || w < before || a < before || w < a || w < lastWrite {
			t.Fatalf("stamp %q: write %d arrival %d (%v)", d, w, a, err)
		}
		lastWrite = w
	}
	// The prompt's directives beat the headers.
	t0 := time.Now()
	res, deltas = call(t, p, "directive [[faults: ok]] [[tokens: 3]] [[pace: chunk=20]]")
	if res.Message.StopReason != provider.StopEnd || len(deltas) != 3 {
		t.Fatalf("directives: %q, %d deltas", res.Message.StopReason, len(deltas))
	}
	// Anthropic: 9 frames after the first, 20 ms apart.
	if el := time.Since(t0); el < 150*time.Millisecond {
		t.Fatalf("paced stream took %v", el)
	}
	st := m.Stats()
	if st.Requests != 3 || st.Steps["500"] != 1 || st.Steps["ok"] != 2 || st.Connections == 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// Bad scripts and the sim-only abort are refused as invalid requests.
func TestBadScripts(t *testing.T) {
	if _, err := New(Options{Faults: "nope"}); err == nil {
		t.Fatal("New accepted a bad --faults")
	}
	_, base := start(t, Options{Faults: "503,ok"})
	p := clients(base, nil)[provider.KindOpenAIChat]
	for _, text := range []string{"x [[faults: abort]]", "y [[faults: 999]]", "z [[pace: chunk=-1]]"} {
		res, _ := call(t, p, text)
		if res.Failure == nil || res.Failure.Status != 400 || !strings.Contains(res.Message.ErrorMessage, "mock:") {
			t.Fatalf("%s: %+v %q", text, res.Failure, res.Message.ErrorMessage)
		}
	}
	// Options.Faults is the default script.
	if res, _ := call(t, p, "default script"); res.Failure == nil || res.Failure.Status != 503 {
		t.Fatalf("default script: %+v", res.Message)
	}
}

// Transport faults: a reset before the headers, a cut stream, a midstream
// reset.
func TestTransportFaults(t *testing.T) {
	_, base := start(t, Options{})
	p := clients(base, nil)[provider.KindAnthropic]
	for _, c := range []struct {
		step   string
		status int
	}{{"reset", 0}, {"cut", 200}, {"midstream:after=2", 200}, {"overloaded-stream", 200}} {
		res, _ := call(t, p, "transport "+c.step+" [[tokens: 6]] [[faults: "+c.step+"]]")
		if res.Message.StopReason != provider.StopError || res.Failure == nil || res.Failure.Status != c.status {
			t.Fatalf("%s: %q %q %+v", c.step, res.Message.StopReason, res.Message.ErrorMessage, res.Failure)
		}
	}
}

func TestStatsAndHealth(t *testing.T) {
	_, base := start(t, Options{})
	for _, path := range []string{"/healthz", "/mock/stats"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		if path == "/mock/stats" {
			var s Stats
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatalf("stats: %v: %s", err, b)
			}
		}
	}
}

// Engines rotate without losing the conversation counts.
func TestRotation(t *testing.T) {
	_, base := start(t, Options{Rotate: 2})
	p := clients(base, nil)[provider.KindAnthropic]
	text := "rotating [[faults: 503,503,503,ok]]"
	for i := range 3 {
		if res, _ := call(t, p, text); res.Failure == nil || res.Failure.Status != 503 {
			t.Fatalf("call %d: %+v", i+1, res.Message)
		}
	}
	if res, _ := call(t, p, text); res.Message.StopReason != provider.StopEnd {
		t.Fatalf("call 4: %+v", res.Message)
	}
}

func TestFindStamp(t *testing.T) {
	frame := []byte(`event: content_block_delta` + "\n" + `data: {"delta":{"text":"s1751642570000000001a1751642569000000002 "}}`)
	w, a, ok := FindStamp(frame)
	if !ok || w != 1751642570000000001 || a != 1751642569000000002 {
		t.Fatalf("FindStamp = %d %d %v", w, a, ok)
	}
	if _, _, ok := FindStamp([]byte("no stamps here, s123a456")); ok {
		t.Fatal("found a stamp in plain text")
	}
	if got := string(appendStamp(nil, 5, 7)); len(got) != len(stampPlaceholder) {
		t.Fatalf("stamp %q is not as long as the placeholder", got)
	}
}

// Gemini, Vertex AI (its token from the mock's TokenPath) and Azure
// OpenAI's Responses API with Entra ID play the same scripts through
// agentd's clients, and with Options.APIKey the mock's own tokens pass.
func TestTokenKindsAndGemini(t *testing.T) {
	m, base := start(t, Options{APIKey: "sk-mock"})
	keys := providertest.NewTokenServer(providertest.TokenOptions{})
	defer keys.Close()
	kinds := map[string]struct {
		p      provider.Provider
		secret string
	}{
		provider.KindGemini: {gemini.New(gemini.Options{BaseURL: base}), "sk-mock"},
		provider.KindVertex: {gemini.New(gemini.Options{BaseURL: base, Vertex: &gemini.VertexOptions{Location: "us-central1", TokenURL: base + TokenPath}}),
			keys.ServiceAccountKey("proj-mock")},
		provider.KindAzureOpenAI: {openai.New(openai.Options{Azure: true, API: openai.APIResponses, EntraID: true, BaseURL: base, TokenURL: base + TokenPath}),
			"tenant-1:client-1:secret-1"},
	}
	for kind, k := range kinds {
		t.Run(kind, func(t *testing.T) {
			run := func(text string) (provider.Result, string) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var b strings.Builder
				res := k.p.Stream(ctx, &provider.Request{Model: "model-x",
					Messages:   []provider.Message{{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: text}}}},
					Credential: provider.Credential{ID: "k", Secret: k.secret}}, func(d provider.Delta) { b.WriteString(d.Text) })
				return res, b.String()
			}
			text := "hello " + kind + " [[faults: 429:retry-after=2,usage,overflow,ok]]"
			res, _ := run(text)
			if v := classify(kind, res); v.Class != retry.ClassTransient || v.Hint != 2*time.Second {
				t.Fatalf("call 1: %q: %s %v", res.Message.ErrorMessage, v.Class, v.Hint)
			}
			res, _ = run(text)
			if v := classify(kind, res); v.Class != retry.ClassUsageLimit {
				t.Fatalf("call 2: %q: %s", res.Message.ErrorMessage, v.Class)
			}
			res, _ = run(text)
			if v := classify(kind, res); v.Class != retry.ClassContextOverflow {
				t.Fatalf("call 3: %q: %s", res.Message.ErrorMessage, v.Class)
			}
			res, got := run(text)
			if res.Message.StopReason != provider.StopEnd || got != "echo: hello "+kind {
				t.Fatalf("call 4: %q %q %q", res.Message.StopReason, res.Message.ErrorMessage, got)
			}
		})
	}
	if st := m.Stats(); st.Tokens != 2 {
		t.Fatalf("tokens issued: %d, want one per token kind", st.Tokens)
	}
}
