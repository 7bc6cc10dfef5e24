package chat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// API is the part of agentd's AgentService the client uses; tests fake it.
type API interface {
	CreateSession(ctx context.Context, in *agentdv1.CreateSessionRequest, opts ...grpc.CallOption) (*agentdv1.Session, error)
	GetSession(ctx context.Context, in *agentdv1.GetSessionRequest, opts ...grpc.CallOption) (*agentdv1.Session, error)
	Prompt(ctx context.Context, in *agentdv1.PromptRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[agentdv1.Event], error)
	StreamEvents(ctx context.Context, in *agentdv1.StreamEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[agentdv1.Event], error)
	Abort(ctx context.Context, in *agentdv1.AbortRequest, opts ...grpc.CallOption) (*agentdv1.AbortResponse, error)
	AbortRetry(ctx context.Context, in *agentdv1.AbortRetryRequest, opts ...grpc.CallOption) (*agentdv1.AbortRetryResponse, error)
	ListMessages(ctx context.Context, in *agentdv1.ListMessagesRequest, opts ...grpc.CallOption) (*agentdv1.ListMessagesResponse, error)
	SubmitToolResults(ctx context.Context, in *agentdv1.SubmitToolResultsRequest, opts ...grpc.CallOption) (*agentdv1.SubmitToolResultsResponse, error)
}

var _ API = agentdv1.AgentServiceClient(nil)

// maxReconnects is how many times in a row a prompt's event stream is
// reopened after the connection to agentd failed.
const maxReconnects = 5

// reconnectDelay is the wait before the n-th reconnect (1, 2, …).
func reconnectDelay(n int) time.Duration {
	return min(250*time.Millisecond<<(n-1), 4*time.Second)
}

// Item is what a prompt's event stream yields: an event, or a notice about
// the connection (lost, resumed).
type Item struct {
	Event  *agentdv1.Event
	Notice string
}

// promptStream follows one prompt to its prompt_end. It opens with the
// Prompt RPC (or, to follow a prompt already running, StreamEvents), and
// when the connection to agentd fails after the prompt has started it
// reopens with StreamEvents after the last seq it delivered, so no event is
// lost or shown twice.
type promptStream struct {
	api       API
	sessionID string
	ctx       context.Context
	cancel    context.CancelFunc
	open      func(context.Context) (recver, error)
	cur       recver

	promptID string // learned from the first event when following
	lastSeq  uint64
	started  bool // an event arrived: the prompt is running on the server
	ended    bool // prompt_end delivered
	failures int  // reconnects in a row without an event
	delay    func(n int) time.Duration
}

// openPrompt returns the event stream of a prompt; the first Next sends it.
func openPrompt(ctx context.Context, api API, sessionID, text string) *promptStream {
	s := newPromptStream(ctx, api, sessionID)
	s.open = func(ctx context.Context) (recver, error) {
		return api.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sessionID, Text: text})
	}
	return s
}

// followPrompt follows the prompt that runs in a session, from the events
// after afterSeq, to its prompt_end.
func followPrompt(ctx context.Context, api API, sessionID string, afterSeq uint64) *promptStream {
	s := newPromptStream(ctx, api, sessionID)
	s.lastSeq, s.started = afterSeq, true
	s.open = func(ctx context.Context) (recver, error) {
		return api.StreamEvents(ctx, &agentdv1.StreamEventsRequest{SessionId: sessionID, AfterSeq: afterSeq})
	}
	return s
}

func newPromptStream(ctx context.Context, api API, sessionID string) *promptStream {
	ctx, cancel := context.WithCancel(ctx)
	return &promptStream{api: api, sessionID: sessionID, ctx: ctx, cancel: cancel, delay: reconnectDelay}
}

// Started reports whether the prompt runs on the server: an event of it
// arrived (or it was already running when followed).
func (s *promptStream) Started() bool { return s.started }

// Close ends the stream. The prompt keeps running on the server.
func (s *promptStream) Close() { s.cancel() }

// Next returns the next item. After prompt_end it returns io.EOF. An error
// before the prompt started (the prompt was refused, agentd is not reachable)
// or after the reconnects ran out is returned as it is.
func (s *promptStream) Next() (Item, error) {
	if s.ended {
		return Item{}, io.EOF
	}
	if s.cur == nil {
		st, err := s.open(s.ctx)
		if err != nil {
			s.cur = errStream{err}
		} else {
			s.cur = st
		}
	}
	for {
		ev, err := s.cur.Recv()
		if err == nil {
			if s.lastSeq > 0 && ev.GetSeq() <= s.lastSeq {
				continue // already delivered before a reconnect
			}
			if s.promptID != "" && ev.GetPromptId() != "" && ev.GetPromptId() != s.promptID {
				continue // another prompt's event (StreamEvents carries them all)
			}
			if s.promptID == "" && ev.GetPromptId() != "" {
				s.promptID = ev.GetPromptId()
			}
			s.lastSeq, s.started, s.failures = ev.GetSeq(), true, 0
			if ev.GetType() == "prompt_end" || ev.GetPromptEnd() != nil {
				s.ended = true
				s.cancel()
			}
			return Item{Event: ev}, nil
		}
		if s.ctx.Err() != nil {
			s.cancel()
			return Item{}, s.ctx.Err()
		}
		if !s.started || !resumable(err) {
			s.cancel()
			if errors.Is(err, io.EOF) {
				return Item{}, io.ErrUnexpectedEOF
			}
			return Item{}, err
		}
		if s.failures >= maxReconnects {
			s.cancel()
			return Item{}, fmt.Errorf("connection to agentd lost (%d reconnects failed): %w", s.failures, err)
		}
		s.failures++
		if d := s.delay(s.failures); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				return Item{}, s.ctx.Err()
			}
		}
		st, oerr := s.api.StreamEvents(s.ctx, &agentdv1.StreamEventsRequest{SessionId: s.sessionID, AfterSeq: s.lastSeq})
		if oerr != nil {
			s.cur = errStream{oerr}
		} else {
			s.cur = st
		}
		if s.failures == 1 {
			return Item{Notice: fmt.Sprintf("[connection lost (%s); resuming after event %d]", errText(err), s.lastSeq)}, nil
		}
	}
}

// resumable reports whether a stream error is the connection's (worth a
// reconnect) rather than the server's answer.
func resumable(err error) bool {
	if errors.Is(err, io.EOF) {
		// The stream ended before prompt_end: the server went away.
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// errText is an error's message without gRPC's "rpc error: code = …" prefix.
func errText(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

// recver is the receiving side of an event stream.
type recver interface {
	Recv() (*agentdv1.Event, error)
}

// errStream is a stream that fails at once.
type errStream struct{ err error }

func (e errStream) Recv() (*agentdv1.Event, error) { return nil, e.err }
