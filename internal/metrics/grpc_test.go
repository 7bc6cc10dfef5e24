package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/internal/metrics"
)

// grpcServerUnder serves the health service on loopback with the given
// interceptors, initialized by init once registered; it returns a client,
// and a channel that gets a value when a call has been counted (the
// metrics' interceptor returned).
func grpcServerUnder(t *testing.T, unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor, init func(*grpc.Server)) (healthpb.HealthClient, *health.Server, <-chan struct{}) {
	t.Helper()
	counted := make(chan struct{}, 100)
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			defer func() { counted <- struct{}{} }()
			return unary(ctx, req, info, h)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			defer func() { counted <- struct{}{} }()
			return stream(srv, ss, info, h)
		}))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	init(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc), hs, counted
}

// exercise makes the same calls on a server: unary calls that succeed and
// fail, and a server stream that sends three messages and is cancelled.
func exercise(t *testing.T, c healthpb.HealthClient, hs *health.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	for range 3 {
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "svc"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "missing"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check(missing) = %v, want NotFound", err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	w, err := c.Watch(wctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
		if i < 2 { // each change is a message of the stream
			st := []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING}[i]
			hs.SetServingStatus("svc", st)
		}
	}
	wcancel()
	for _, err := w.Recv(); err == nil; _, err = w.Recv() {
	}
}

// family is a metric family's comparable form: its help, type and every
// series' labels and value (a histogram's sample count: its times differ).
func family(mf *dto.MetricFamily) []string {
	out := []string{mf.GetHelp(), mf.GetType().String()}
	if mf.GetType() == dto.MetricType_HISTOGRAM && len(mf.GetMetric()) > 0 {
		var bounds []string
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, fmt.Sprint(b.GetUpperBound()))
		}
		out = append(out, "buckets "+strings.Join(bounds, ","))
	}
	for _, m := range mf.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		v := m.GetCounter().GetValue()
		if h := m.GetHistogram(); h != nil {
			v = float64(h.GetSampleCount())
		}
		out = append(out, fmt.Sprintf("%s %g", strings.Join(ls, ","), v))
	}
	slices.Sort(out[2:])
	return out
}

func gatherFamilies(t *testing.T, reg *prometheus.Registry) map[string][]string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, mf := range mfs {
		out[mf.GetName()] = family(mf)
	}
	return out
}

// waitCounted waits until the server has counted n calls: it counts a
// call when its handler returns, which can be after the client saw its end.
func waitCounted(t *testing.T, counted <-chan struct{}, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range n {
		select {
		case <-counted:
		case <-ctx.Done():
			t.Fatalf("%d calls counted, want %d", i, n)
		}
	}
}

// TestGRPCServerMetricsAsTheProvider: the same calls on a server with
// go-grpc-middleware's Prometheus provider and on one with GRPCServer give
// the same metric families: names, help, types, buckets, label values and
// counts, the series of every registered method and code at 0 included.
func TestGRPCServerMetricsAsTheProvider(t *testing.T) {
	want := prometheus.NewRegistry()
	pm := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	want.MustRegister(pm)
	c, hs, counted := grpcServerUnder(t, pm.UnaryServerInterceptor(), pm.StreamServerInterceptor(), func(gs *grpc.Server) { pm.InitializeMetrics(gs) })
	exercise(t, c, hs)
	waitCounted(t, counted, 5)

	got := prometheus.NewRegistry()
	gm := metrics.NewGRPCServer()
	got.MustRegister(gm)
	c, hs, counted = grpcServerUnder(t, gm.UnaryInterceptor, gm.StreamInterceptor, func(gs *grpc.Server) { gm.Initialize(gs) })
	exercise(t, c, hs)
	waitCounted(t, counted, 5)

	w, g := gatherFamilies(t, want), gatherFamilies(t, got)
	if len(w) != 5 {
		t.Fatalf("the provider's families: %d, want 5", len(w))
	}
	for name, wf := range w {
		gf, ok := g[name]
		if !ok {
			t.Errorf("%s: missing", name)
			continue
		}
		if !slices.Equal(gf, wf) {
			t.Errorf("%s:\n got %q\nwant %q", name, gf, wf)
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			t.Errorf("%s: not the provider's", name)
		}
	}
}

// TestGRPCServerMetricsUnknownMethod: a method Initialize did not see is
// counted under its own labels, created on first use.
func TestGRPCServerMetricsUnknownMethod(t *testing.T) {
	reg := prometheus.NewRegistry()
	gm := metrics.NewGRPCServer()
	reg.MustRegister(gm)
	info := &grpc.StreamServerInfo{FullMethod: "/x.Svc/Follow", IsServerStream: true}
	err := gm.StreamInterceptor(nil, nil, info, func(_ any, ss grpc.ServerStream) error {
		return status.Error(codes.Unavailable, "gone")
	})
	if status.Code(err) != codes.Unavailable {
		t.Fatal(err)
	}
	_, err = gm.UnaryInterceptor(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: "bad"}, func(context.Context, any) (any, error) {
		return nil, context.Canceled
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	f := gatherFamilies(t, reg)
	for _, want := range []string{
		"grpc_code=Unavailable,grpc_method=Follow,grpc_service=x.Svc,grpc_type=server_stream 1",
		"grpc_code=Canceled,grpc_method=unknown,grpc_service=unknown,grpc_type=unary 1",
	} {
		if !slices.Contains(f["grpc_server_handled_total"], want) {
			t.Errorf("handled: %q not in %q", want, f["grpc_server_handled_total"])
		}
	}
}
