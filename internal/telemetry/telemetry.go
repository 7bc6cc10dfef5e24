// Package telemetry is agentd's OpenTelemetry tracing: the tracer provider
// that exports spans over OTLP/gRPC (telemetry.otlp), and the trace context
// of incoming calls (W3C traceparent / tracestate, from gRPC metadata; the
// HTTP face forwards those headers as metadata). The spans themselves are
// the session engine's (session.Options.Tracer). Off (no endpoint), none of
// this exists: no provider, no exporter, no interceptor.
package telemetry

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/agentd/agentd/internal/config"
)

// ScopeName is the instrumentation scope of agentd's spans.
const ScopeName = "github.com/agentd/agentd"

// Tracing is a running tracer provider and its exporter.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// Options adjust Start (tests).
type Options struct {
	// BatchTimeout is the longest a span waits for its batch's export (0:
	// the SDK's default, 5 s).
	BatchTimeout time.Duration
	// Version is the service.version attribute ("" leaves it out).
	Version string
}

// Start builds the tracer provider of cfg; nil (tracing off) when cfg has
// no OTLP endpoint. The exporter connects lazily: an unreachable collector
// does not stop start-up, its spans are dropped (and the SDK logs why).
func Start(ctx context.Context, cfg config.Telemetry, o Options) (*Tracing, error) {
	if cfg.OTLP.Endpoint == "" {
		return nil, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.OTLP.Endpoint)}
	if cfg.OTLP.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("telemetry.otlp: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "agentd"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	var bopts []sdktrace.BatchSpanProcessorOption
	if o.BatchTimeout > 0 {
		bopts = append(bopts, sdktrace.WithBatchTimeout(o.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, bopts...),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	)
	return &Tracing{tp: tp, tracer: tp.Tracer(ScopeName)}, nil
}

// NewWithExporter is a Tracing that batches its spans to exp (tests and
// benchmarks: an exporter of their own).
func NewWithExporter(exp sdktrace.SpanExporter) *Tracing {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "agentd"))))
	return &Tracing{tp: tp, tracer: tp.Tracer(ScopeName)}
}

// Tracer is the tracer of agentd's spans.
func (t *Tracing) Tracer() trace.Tracer { return t.tracer }

// ForceFlush exports every ended span now.
func (t *Tracing) ForceFlush(ctx context.Context) error { return t.tp.ForceFlush(ctx) }

// Shutdown exports what is left and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

// propagator reads W3C trace context.
var propagator = propagation.TraceContext{}

// mdCarrier reads a gRPC call's metadata as a propagation carrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c mdCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// Extract returns ctx with the remote span context of its incoming
// metadata's traceparent (and tracestate), when there is a valid one.
func Extract(ctx context.Context) context.Context {
	// A look-up first, not a copy of the whole metadata: most calls carry
	// no trace context.
	tp := metadata.ValueFromIncomingContext(ctx, "traceparent")
	if len(tp) == 0 {
		return ctx
	}
	md := metadata.MD{"traceparent": tp}
	if ts := metadata.ValueFromIncomingContext(ctx, "tracestate"); len(ts) > 0 {
		md["tracestate"] = ts
	}
	return propagator.Extract(ctx, mdCarrier(md))
}

// UnaryServerInterceptor puts the call's trace context in its context.
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(Extract(ctx), req)
}

// StreamServerInterceptor puts the call's trace context in its stream's
// context.
func StreamServerInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx := Extract(ss.Context())
	if ctx == ss.Context() {
		return h(srv, ss)
	}
	return h(srv, tracedStream{ServerStream: ss, ctx: ctx})
}

type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s tracedStream) Context() context.Context { return s.ctx }
