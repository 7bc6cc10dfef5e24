// Package otlptest is an in-process OpenTelemetry collector for tests: a
// gRPC server implementing the OTLP trace service
// (go.opentelemetry.io/proto/otlp), which keeps every span it is sent.
package otlptest

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

// Collector receives spans over OTLP/gRPC on a loopback port.
type Collector struct {
	collectortrace.UnimplementedTraceServiceServer
	srv  *grpc.Server
	addr string

	mu       sync.Mutex
	spans    []*tracepb.Span
	requests []*collectortrace.ExportTraceServiceRequest
	changed  chan struct{}
}

// Start serves a collector until the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{srv: grpc.NewServer(), addr: lis.Addr().String(), changed: make(chan struct{})}
	collectortrace.RegisterTraceServiceServer(c.srv, c)
	go func() { _ = c.srv.Serve(lis) }()
	t.Cleanup(c.srv.Stop)
	return c
}

// Addr is the collector's host:port (telemetry.otlp.endpoint).
func (c *Collector) Addr() string { return c.addr }

// Export implements the trace service.
func (c *Collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, req)
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// WaitSpans waits until a span satisfying done has arrived (or ctx ends)
// and returns every span received.
func (c *Collector) WaitSpans(ctx context.Context, done func(*tracepb.Span) bool) ([]*tracepb.Span, error) {
	for {
		c.mu.Lock()
		spans, ch := append([]*tracepb.Span(nil), c.spans...), c.changed
		c.mu.Unlock()
		for _, s := range spans {
			if done(s) {
				return spans, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return spans, ctx.Err()
		}
	}
}

// Dump is every export received, as JSON: what a test searches for text
// that must not be there.
func (c *Collector) Dump() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []byte
	for _, r := range c.requests {
		b, _ := protojson.Marshal(r)
		out = append(out, b...)
		out = append(out, '\n')
	}
	return string(out)
}

// Attr returns a span's attribute value as a string ("" when absent):
// strings as they are, numbers and booleans formatted, arrays as JSON.
func Attr(s *tracepb.Span, key string) string { return attrOf(s.GetAttributes(), key) }

// EventAttr is Attr for an event's attribute.
func EventAttr(e *tracepb.Span_Event, key string) string { return attrOf(e.GetAttributes(), key) }

func attrOf(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() != key {
			continue
		}
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			return x.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			return strconv.FormatBool(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
		default:
			b, _ := protojson.Marshal(v)
			return string(b)
		}
	}
	return ""
}

// Has reports whether a span has the attribute.
func Has(s *tracepb.Span, key string) bool {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return true
		}
	}
	return false
}

// TraceID and SpanID are a span's ids in hex; ParentID its parent's ("" for a root).
func TraceID(s *tracepb.Span) string  { return hex.EncodeToString(s.GetTraceId()) }
func SpanID(s *tracepb.Span) string   { return hex.EncodeToString(s.GetSpanId()) }
func ParentID(s *tracepb.Span) string { return hex.EncodeToString(s.GetParentSpanId()) }
