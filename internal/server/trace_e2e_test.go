package server_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/telemetry/otlptest"
	"github.com/agentd/agentd/internal/testkit"
)

// With telemetry.otlp.endpoint, a prompt's spans go to the collector in
// the trace its caller named: traceparent in the gRPC metadata, or the
// HTTP header on the REST face (gateway and native SSE routes alike).
func TestTracesFollowTheCallersTraceContext(t *testing.T) {
	coll := otlptest.Start(t)
	ts := start(t, fmt.Sprintf(`telemetry: {otlp: {endpoint: %q, insecure: true}}
retry: {base_delay_ms: 1}
providers:
  - name: sim
    kind: simulated
    credentials: [{id: k1, api_key: sk-e2e-trace-SECRET-abcdef}]
`, coll.Addr()))
	ctx := testkit.Context(t)
	const grpcTrace, restTrace = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"

	// gRPC: traceparent in the metadata.
	sess, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	gctx := metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+grpcTrace+"-b7ad6b7169203331-01")
	stream, err := ts.agent.Prompt(gctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi [[faults: 529,ok]]"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}

	// REST with SSE: the traceparent header.
	id := createREST(t, ctx, ts.baseURL, `{"model":"sim/echo"}`, nil)
	resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"hello"}`, http.Header{
		"Accept": {"text/event-stream"}, "Traceparent": {"00-" + restTrace + "-00f067aa0ba902b7-01"}})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "prompt_end") {
		t.Fatalf("REST prompt: %d %s", resp.StatusCode, body)
	}

	if err := ts.srv.FlushTraces(ctx); err != nil {
		t.Fatal(err)
	}
	inTrace := func(trace string) func(*tracepb.Span) bool {
		return func(s *tracepb.Span) bool { return s.GetName() == session.SpanPrompt && otlptest.TraceID(s) == trace }
	}
	if _, err := coll.WaitSpans(ctx, inTrace(restTrace)); err != nil {
		t.Fatalf("no prompt span in the REST caller's trace: %v", err)
	}
	spans, err := coll.WaitSpans(ctx, inTrace(grpcTrace))
	if err != nil {
		t.Fatalf("no prompt span in the gRPC caller's trace: %v", err)
	}
	attempts := map[string]int{}
	for _, s := range spans {
		if strings.HasPrefix(s.GetName(), "chat ") {
			attempts[otlptest.TraceID(s)]++
		}
	}
	if attempts[grpcTrace] != 2 || attempts[restTrace] != 1 {
		t.Errorf("attempt spans by trace %v: want 2 in the gRPC trace (one retry), 1 in the REST one", attempts)
	}
	if dump := coll.Dump(); strings.Contains(dump, "SECRET") || !strings.Contains(dump, `"agentd"`) {
		t.Errorf("spans carry a secret, or no service.name agentd")
	}
}
