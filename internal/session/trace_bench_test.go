package session_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// discardExporter takes spans and drops them: the SDK's whole cost
// (recording, batching) without a network.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkPromptTracing is agentd's CPU per prompt (the simulated
// provider answering at once, a priced catalog: usage and cost accounted
// on every call) with tracing off, and on with the SDK recording every
// span (a prompt span, an attempt span per call, the retry events) into a
// batch processor. "retry" prompts fail once (an overloaded stream that
// reports usage) and retry: two calls, a retry event, retry usage.
// Compare the ratios within one run:
//
//	go test -run '^$' -bench PromptTracing -benchmem -count 5 ./internal/session
func BenchmarkPromptTracing(b *testing.B) {
	for _, prompt := range []struct{ name, text string }{{"plain", "hello there"}, {"retry", "hello [[faults: overloaded-stream,ok]]"}} {
		for _, mode := range []string{"off", "on"} {
			b.Run(prompt.name+"/tracing="+mode, func(b *testing.B) {
				var tracer trace.Tracer
				if mode == "on" {
					tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
					defer tp.Shutdown(context.Background())
					tracer = tp.Tracer("bench")
				}
				settings := retry.DefaultSettings()
				settings.BaseDelay = time.Microsecond
				m := session.NewManager(session.Options{
					Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo"},
						Catalog: map[string]provider.ModelInfo{"echo": {Name: "echo", Price: &provider.Price{InputPerMTok: 1, OutputPerMTok: 2, CacheReadPerMTok: 0.1}}},
						Client:  sim.New(sim.Options{})}},
					Retry:  settings,
					Tracer: tracer,
					Rand:   func() float64 { return 0 },
				})
				defer m.Close(context.Background())
				ctx := context.Background()
				var s *session.Session
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if i%50 == 0 {
						// A fresh session now and then: histories stay short.
						var err error
						if s, err = m.Create(ctx, "t", session.CreateParams{Model: "sim/echo"}); err != nil {
							b.Fatal(err)
						}
					}
					i++
					_, sub, err := s.Prompt(ctx, prompt.text)
					if err != nil {
						b.Fatal(err)
					}
					readToPromptEnd(b, sub)
					sub.Close()
				}
			})
		}
	}
}
