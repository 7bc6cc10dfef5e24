package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentd/agentd/internal/server/sse"
	"github.com/agentd/agentd/internal/telemetry"
	"github.com/agentd/agentd/internal/telemetry/otlptest"
)

// discardExporter drops the spans it is given.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkSSEPromptTracing is agentd's whole cost per prompt (a native
// SSE prompt on a fresh session, as BenchmarkSSEPrompt: HTTP, the gateway's
// marshaling, the session engine, usage accounting) with tracing off; on,
// recording every span into the SDK's batch processor (an exporter that
// drops them: agentd's own cost); and on with export over OTLP/gRPC to a
// collector that runs in this process too (its receiving is counted: an
// upper bound). Each op runs one prompt on each of the three servers, one
// after the other, so that the machine's noise falls on all alike; the
// metrics are each one's mean wall time and process CPU time (getrusage:
// other processes do not count) per prompt, and the CPU ratios.
//
//	go test -run '^$' -bench SSEPromptTracing -benchmem -count 5 ./internal/server/
func BenchmarkSSEPromptTracing(b *testing.B) {
	const limits = "limits: {max_sessions_per_tenant: 10000000}\n"
	newP := func(yaml string, tr *telemetry.Tracing) *prompter {
		p := &prompter{b: b, ts: startSSETraced(b, limits+yaml, tr), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}}
		b.Cleanup(p.client.CloseIdleConnections)
		return p
	}
	coll := otlptest.Start(b)
	rec := telemetry.NewWithExporter(discardExporter{})
	b.Cleanup(func() { rec.Shutdown(context.Background()) })
	modes := []struct {
		name string
		p    *prompter
	}{
		{"off", newP("", nil)},
		{"on", newP("", rec)},
		{"otlp", newP(fmt.Sprintf("telemetry: {otlp: {endpoint: %q, insecure: true}}\n", coll.Addr()), nil)},
	}
	// "echo": the 3-word echo (9 events); "answer": a 200-word answer
	// (205 events), an answer's usual size.
	for _, answer := range []struct{ name, text string }{{"echo", "one two three"}, {"answer", "[[tokens: 200]]"}} {
		b.Run(answer.name, func(b *testing.B) {
			for _, m := range modes {
				for range 20 {
					ssePromptText(b, m.p, m.p.newSession(), answer.text)
				}
			}
			wall := make([]time.Duration, len(modes))
			cpu := make([]time.Duration, len(modes))
			n := 0
			for b.Loop() {
				for i, m := range modes {
					id := m.p.newSession()
					c0, began := processCPU(b), time.Now()
					ssePromptText(b, m.p, id, answer.text)
					wall[i] += time.Since(began)
					cpu[i] += processCPU(b) - c0
				}
				n++
			}
			for i, m := range modes {
				b.ReportMetric(float64(wall[i].Nanoseconds())/float64(n), m.name+"-ns/prompt")
				b.ReportMetric(float64(cpu[i].Nanoseconds())/float64(n), m.name+"-cpu-ns/prompt")
			}
			b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "on/off-cpu")
			b.ReportMetric(float64(cpu[2])/float64(cpu[0]), "otlp/off-cpu")
		})
	}
}

// ssePromptText runs a native SSE prompt of text on session id to its end.
func ssePromptText(b *testing.B, p *prompter, id, text string) {
	body, _ := json.Marshal(map[string]string{"text": text})
	req, _ := http.NewRequest("POST", p.ts.base+"/v1/sessions/"+id+":prompt", bytes.NewReader(body))
	req.Header.Set("Accept", sse.ContentType)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(rest, []byte("event: prompt_end")) {
		b.Fatalf("no prompt_end: %q", rest)
	}
}

// processCPU is the CPU time this process used so far (user + system): a
// prompt's CPU whatever else the machine runs.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
