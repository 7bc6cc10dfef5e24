package bench

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/internal/bench/mock"
)

// The gRPC floor relays the mock's stream as agentd's gRPC API would: a
// MessageUpdate per text delta (the mock's stamps intact), then a
// PromptEnd; a provider error is the call's Unavailable, not a hang.
func TestGRPCFloorRelaysTheMockStream(t *testing.T) {
	m, err := mock.New(mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(m)
	defer hs.Close()
	srv := newGRPCFloor(hs.URL)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, api, err := DialGRPCFloor(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	turn := &Turn{}
	headers := map[string]string{mock.HeaderStamp: "1", mock.HeaderTokens: "5"}
	if err := GRPCFloorCall(ctx, api, "hello", headers, turn); err != nil {
		t.Fatal(err)
	}
	if len(turn.Deltas) != 5 || turn.Outcome != "completed" {
		t.Fatalf("%d stamped deltas, outcome %q; want 5, completed", len(turn.Deltas), turn.Outcome)
	}
	for i, d := range turn.Deltas {
		if d.Write == 0 || d.Arrival == 0 || d.Recv < d.Write {
			t.Errorf("delta %d: stamps %+v", i, d)
		}
	}

	turn = &Turn{}
	err = GRPCFloorCall(ctx, api, "a fault", map[string]string{mock.HeaderFaults: "529"}, turn)
	if status.Code(err) != codes.Unavailable || turn.Outcome != "" {
		t.Fatalf("a 529: %v, outcome %q; want Unavailable and no PromptEnd", err, turn.Outcome)
	}
}
