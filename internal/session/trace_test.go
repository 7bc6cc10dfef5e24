package session_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/telemetry"
	"github.com/agentd/agentd/internal/telemetry/otlptest"
	"github.com/agentd/agentd/internal/testkit"
)

const traceSecret = "sk-trace-SECRET-0123456789abcdef"

// A prompt retried twice is one agentd.prompt span, the child of the
// caller's trace context, with three attempt spans named and attributed
// after the GenAI conventions, the retry decisions as its events, and no
// secret or prompt text anywhere; log lines about it carry its trace id.
func TestPromptTrace(t *testing.T) {
	coll := otlptest.Start(t)
	tr, err := telemetry.Start(context.Background(), config.Telemetry{OTLP: config.OTLP{Endpoint: coll.Addr(), Insecure: true}}, telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	store := credstore.NewMemory(credstore.MemoryOptions{})
	if _, err := store.Add(context.Background(), credstore.Credential{ID: "key-a", Provider: "sim", Secret: traceSecret}); err != nil {
		t.Fatal(err)
	}
	settings := retry.DefaultSettings()
	settings.BaseDelay = time.Millisecond
	logs := &syncBuffer{}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo"},
			Catalog: map[string]provider.ModelInfo{"echo": {Name: "echo", Price: &provider.Price{InputPerMTok: 1, OutputPerMTok: 2}}},
			Client:  sim.New(sim.Options{})}},
		Retry:       settings,
		Credentials: store,
		Tracer:      tr.Tracer(),
		Logger:      slog.New(slog.NewTextHandler(logs, nil)),
		Rand:        func() float64 { return 0 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	s := create(t, m, session.RetryOverrides{})

	// The caller's trace context, as the server puts it in the call's.
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(testkit.Context(t), parent)
	spans := tracedPrompt(ctx, t, s, tr, coll, "zebra-quartz [[faults: 529,503,ok]]")
	var promptSpan *tracepb.Span
	var attempts []*tracepb.Span
	for _, sp := range spans {
		switch {
		case sp.GetName() == session.SpanPrompt:
			if promptSpan != nil {
				t.Fatalf("two prompt spans")
			}
			promptSpan = sp
		case strings.HasPrefix(sp.GetName(), "chat "):
			attempts = append(attempts, sp)
		}
	}
	if otlptest.TraceID(promptSpan) != parent.TraceID().String() || otlptest.ParentID(promptSpan) != parent.SpanID().String() {
		t.Errorf("prompt span in trace %s under %s, want %s under %s", otlptest.TraceID(promptSpan), otlptest.ParentID(promptSpan),
			parent.TraceID(), parent.SpanID())
	}
	if otlptest.Attr(promptSpan, "gen_ai.conversation.id") != s.ID() || otlptest.Attr(promptSpan, "agentd.prompt.outcome") != "completed" {
		t.Errorf("prompt span attributes %v", promptSpan.GetAttributes())
	}
	if len(attempts) != 3 {
		t.Fatalf("%d attempt spans, want 3 (2 retries + 1)", len(attempts))
	}
	for i, a := range attempts {
		if otlptest.ParentID(a) != otlptest.SpanID(promptSpan) || otlptest.TraceID(a) != parent.TraceID().String() {
			t.Errorf("attempt %d is not a child of the prompt span", i)
		}
		if a.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || a.GetName() != "chat echo" {
			t.Errorf("attempt %d: %s kind %v", i, a.GetName(), a.GetKind())
		}
		for k, want := range map[string]string{
			"gen_ai.operation.name": "chat", "gen_ai.system": "agentd.simulated", "gen_ai.request.model": "echo",
			"gen_ai.response.model": "echo", "agentd.credential.id": "key-a", "agentd.call.index": []string{"0", "1", "2"}[i],
		} {
			if got := otlptest.Attr(a, k); got != want {
				t.Errorf("attempt %d: %s = %q, want %q", i, k, got, want)
			}
		}
		if i < 2 {
			if otlptest.Attr(a, "error.type") != "transient" || a.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("failed attempt %d: error.type %q status %v", i, otlptest.Attr(a, "error.type"), a.GetStatus())
			}
			if want := []string{"529", "503"}[i]; otlptest.Attr(a, "agentd.error.status") != want {
				t.Errorf("failed attempt %d: status %q, want %s", i, otlptest.Attr(a, "agentd.error.status"), want)
			}
			continue
		}
		if otlptest.Has(a, "error.type") || otlptest.Attr(a, "gen_ai.usage.input_tokens") != "3" || otlptest.Attr(a, "gen_ai.usage.output_tokens") != "2" ||
			otlptest.Attr(a, "gen_ai.response.finish_reasons") == "" || !otlptest.Has(a, "agentd.cost_usd") {
			t.Errorf("the answering attempt: %v", a.GetAttributes())
		}
	}
	var retries []*tracepb.Span_Event
	for _, e := range promptSpan.GetEvents() {
		if e.GetName() == session.EventAutoRetryStart {
			retries = append(retries, e)
		}
	}
	if len(retries) != 2 {
		t.Fatalf("prompt span events %v, want 2 auto_retry_start", promptSpan.GetEvents())
	}
	for i, e := range retries {
		if otlptest.EventAttr(e, "agentd.retry.class") != "transient" || otlptest.EventAttr(e, "agentd.retry.delay_source") != "estimate" ||
			otlptest.EventAttr(e, "agentd.retry.attempt") != []string{"1", "2"}[i] || otlptest.EventAttr(e, "agentd.retry.delay_ms") == "" {
			t.Errorf("retry event %d: %v", i, e.GetAttributes())
		}
	}
	dump := coll.Dump()
	for _, secret := range []string{traceSecret, traceSecret[:12], "zebra-quartz"} {
		if strings.Contains(dump, secret) {
			t.Errorf("the exported spans contain %q", secret)
		}
	}
	if !strings.Contains(logs.String(), "trace_id="+parent.TraceID().String()) {
		t.Errorf("no log line carries the trace id:\n%s", logs.String())
	}
}

// Every provider kind is named by the GenAI conventions' value for it.
func TestGenAISystemOfEveryKind(t *testing.T) {
	for kind, want := range map[string]string{
		provider.KindAnthropic: "anthropic", provider.KindOpenAIResponses: "openai", provider.KindOpenAIChat: "openai",
		provider.KindAzureOpenAI: "az.ai.openai", provider.KindGemini: "gcp.gemini", provider.KindVertex: "gcp.vertex_ai",
		provider.KindBedrock: "aws.bedrock", provider.KindSimulated: "agentd.simulated",
	} {
		if got := session.GenAISystem(kind); got != want {
			t.Errorf("%s: %s, want %s", kind, got, want)
		}
	}
}

// With CaptureContent, each attempt span carries the prompt and the answer
// in a gen_ai.content event (the failed attempt's completion empty), and
// still no secret; without it, the text is nowhere in the export (the
// test above).
func TestPromptTraceCapturesContent(t *testing.T) {
	coll := otlptest.Start(t)
	tr, err := telemetry.Start(context.Background(), config.Telemetry{OTLP: config.OTLP{Endpoint: coll.Addr(), Insecure: true}}, telemetry.Options{BatchTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	store := credstore.NewMemory(credstore.MemoryOptions{})
	if _, err := store.Add(context.Background(), credstore.Credential{ID: "key-a", Provider: "sim", Secret: traceSecret}); err != nil {
		t.Fatal(err)
	}
	settings := retry.DefaultSettings()
	settings.BaseDelay = time.Millisecond
	m := session.NewManager(session.Options{
		Providers:      []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo"}, Client: sim.New(sim.Options{})}},
		Retry:          settings,
		Credentials:    store,
		Tracer:         tr.Tracer(),
		CaptureContent: true,
		Rand:           func() float64 { return 0 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	s := create(t, m, session.RetryOverrides{})
	const text = "zebra-quartz [[faults: 503,ok]]"
	spans := tracedPrompt(testkit.Context(t), t, s, tr, coll, text)
	var contents []*tracepb.Span_Event
	for _, sp := range spans {
		if !strings.HasPrefix(sp.GetName(), "chat ") {
			continue
		}
		for _, e := range sp.GetEvents() {
			if e.GetName() == "gen_ai.content" {
				contents = append(contents, e)
			}
		}
	}
	if len(contents) != 2 {
		t.Fatalf("%d gen_ai.content events, want one per attempt (2)", len(contents))
	}
	for i, e := range contents {
		if p := otlptest.EventAttr(e, "gen_ai.prompt"); !strings.Contains(p, "zebra-quartz") {
			t.Errorf("attempt %d: gen_ai.prompt = %q", i, p)
		}
	}
	if c := otlptest.EventAttr(contents[1], "gen_ai.completion"); !strings.Contains(c, "zebra-quartz") {
		t.Errorf("the answering attempt's gen_ai.completion = %q, want the echo of the prompt", c)
	}
	if dump := coll.Dump(); strings.Contains(dump, traceSecret) || strings.Contains(dump, traceSecret[:12]) {
		t.Error("the exported spans contain the credential's secret")
	}
}

// A prompt whose caller's trace context is not sampled records nothing (the
// SDK's default parent-based sampler): no prompt span, no attempt span; a
// sampled one records both.
func TestUnsampledPromptRecordsNothing(t *testing.T) {
	rec := endedSpans{tracetest.NewSpanRecorder(), make(chan struct{}, 8)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	m := session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo"}, Client: sim.New(sim.Options{})}},
		Retry:     retry.DefaultSettings(),
		Tracer:    tp.Tracer("test"),
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	s := create(t, m, session.RetryOverrides{})
	for _, sampled := range []bool{false, true} {
		var flags trace.TraceFlags
		if sampled {
			flags = trace.FlagsSampled
		}
		parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: flags, Remote: true})
		ctx, cancel := context.WithTimeout(trace.ContextWithRemoteSpanContext(context.Background(), parent), 10*time.Second)
		_, sub, err := s.Prompt(ctx, "hello")
		if err != nil {
			t.Fatal(err)
		}
		readUntilEnd(t, sub)
		sub.Close()
		cancel()
		want := 0
		if sampled {
			want = 2 // the prompt's span and its attempt's
			// The prompt's span ends after its prompt_end went out.
			for range want {
				select {
				case <-rec.ended:
				case <-testkit.Context(t).Done():
					t.Fatalf("sampled: %d spans ended, want %d", len(rec.Ended()), want)
				}
			}
		}
		// Unsampled, no span is made at all: had one been, the sampled
		// prompt's count would be over.
		if got := len(rec.Ended()); got != want {
			t.Errorf("sampled %v: %d spans recorded, want %d", sampled, got, want)
		}
	}
}

// endedSpans is a span recorder that says when a span ended.
type endedSpans struct {
	*tracetest.SpanRecorder
	ended chan struct{}
}

func (r endedSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	r.SpanRecorder.OnEnd(s)
	r.ended <- struct{}{}
}

// tracedPrompt runs text on s to a completed prompt_end and returns the
// spans exported up to its prompt span.
func tracedPrompt(ctx context.Context, t *testing.T, s *session.Session, tr *telemetry.Tracing, coll *otlptest.Collector, text string) []*tracepb.Span {
	t.Helper()
	_, sub, err := s.Prompt(ctx, text)
	if err != nil {
		t.Fatal(err)
	}
	evs := readUntilEnd(t, sub)
	sub.Close()
	if last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end %+v", last(evs))
	}
	if err := tr.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	spans, err := coll.WaitSpans(ctx, func(s *tracepb.Span) bool { return s.GetName() == session.SpanPrompt })
	if err != nil {
		t.Fatalf("no prompt span: %v", err)
	}
	return spans
}
