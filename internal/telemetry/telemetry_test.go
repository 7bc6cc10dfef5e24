package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/agentd/agentd/internal/config"
)

func TestStartOffWithoutEndpoint(t *testing.T) {
	tr, err := Start(context.Background(), config.Telemetry{}, Options{})
	if tr != nil || err != nil {
		t.Errorf("Start without an endpoint = %v, %v; want nil, nil (off)", tr, err)
	}
}

// Extract takes a valid W3C traceparent from the metadata and ignores a
// malformed one (the prompt then starts a trace of its own).
func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		md    metadata.MD
		trace string
	}{
		{metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate", "vendor=x"),
			"4bf92f3577b34da6a3ce929d0e0e4736"},
		{metadata.Pairs("traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"), ""},
		{metadata.Pairs("traceparent", "garbage"), ""},
		{metadata.Pairs("other", "x"), ""},
		{nil, ""},
	} {
		ctx := context.Background()
		if tc.md != nil {
			ctx = metadata.NewIncomingContext(ctx, tc.md)
		}
		sc := trace.SpanContextFromContext(Extract(ctx))
		got := ""
		if sc.IsValid() {
			got = sc.TraceID().String()
			if !sc.IsRemote() || !sc.IsSampled() {
				t.Errorf("%v: span context %+v, want remote and sampled", tc.md, sc)
			}
		}
		if got != tc.trace {
			t.Errorf("%v: trace %q, want %q", tc.md, got, tc.trace)
		}
	}
}
