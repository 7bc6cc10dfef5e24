package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// eventStream is the server side of a streaming call as forward uses it:
// the types of the events it sends are kept (an event is valid only until
// the next Send, as gRPC encodes it within Send).
type eventStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan string
}

func (s *eventStream) Context() context.Context { return s.ctx }

func (s *eventStream) Send(e *agentdv1.Event) error {
	s.sent <- e.GetType()
	return nil
}

// A stream waiting for its next event ends when the server drains while
// its session's log stays open (a drain that ends the streams before the
// logs): UNAVAILABLE, told to resume; the events before it are sent first.
func TestForwardEndsWithTheDrain(t *testing.T) {
	ts := startSSE(t, "")
	ctx := testkit.ContextFor(t, 30*time.Second)
	s, err := ts.srv.Sessions().Create(ctx, LocalTenant, session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := s.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	drain, drained := context.WithCancel(ctx)
	defer drained()
	a := &agentService{sessions: ts.srv.Sessions(), drain: drain}
	stream := &eventStream{ctx: ctx, sent: make(chan string, 64)}
	done := make(chan error, 1)
	go func() {
		done <- a.forward(ctx, sub, stream, false, func(*session.Event) bool { return false })
	}()
	if _, _, err := s.Prompt(ctx, "a b"); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case typ := <-stream.sent:
			if typ != session.EventPromptEnd {
				continue
			}
		case err := <-done:
			t.Fatalf("forward ended before the drain: %v", err)
		case <-ctx.Done():
			t.Fatal("no prompt_end forwarded")
		}
		break
	}
	drained()
	select {
	case err := <-done:
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
			t.Fatalf("forward after the drain = %v, want UNAVAILABLE, shutting down", err)
		}
	case <-ctx.Done():
		t.Fatal("forward did not end with the drain")
	}
}
