package server

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/server/convert"
	"github.com/agentd/agentd/internal/server/token"
	"github.com/agentd/agentd/internal/session"
)

// agentService implements agentd.v1.AgentService over the session engine.
type agentService struct {
	agentdv1.UnimplementedAgentServiceServer
	sessions *session.Manager
	tickets  *token.Tickets
	pages    *token.Pages
	drain    context.Context // done when the server drains
	// followers bounds each tenant's StreamEvents streams on this replica
	// (a Prompt stream is bounded by the tenant's running prompts).
	followers *streamSlots
}

// maxPageBytes bounds a listing's page: it holds items while their
// encoding stays within it (always at least one), and gives the next
// page's token for the rest. No answer grows past what a client takes.
const maxPageBytes = 1 << 20

func (a *agentService) session(ctx context.Context, id string) (*session.Session, error) {
	return a.lookup(ctx, id, a.sessions.Get)
}

// lookup finds the caller's session id with get (Get, or GetToPrompt).
func (a *agentService) lookup(ctx context.Context, id string, get func(ctx context.Context, tenant, id string) (*session.Session, error)) (*session.Session, error) {
	if id == "" {
		return nil, convert.InvalidArg("session_id", "is required")
	}
	s, err := get(ctx, tenantOf(ctx), id)
	return s, convert.ToStatus(err)
}

func (a *agentService) CreateSession(ctx context.Context, req *agentdv1.CreateSessionRequest) (*agentdv1.Session, error) {
	overrides, err := convert.OverridesFromProto(req.GetRetry())
	if err != nil {
		return nil, err
	}
	tools, err := convert.ToolsFromProto(req.GetTools())
	if err != nil {
		return nil, err
	}
	var params provider.Params
	if p, err := convert.ParamsFromProto(req.GetParams()); err != nil {
		return nil, err
	} else if p != nil {
		params = *p
	}
	s, err := a.sessions.Create(ctx, tenantOf(ctx), session.CreateParams{
		Model: req.GetModel(), Role: req.GetRole(), SystemPrompt: req.GetSystemPrompt(),
		Retry: overrides, Tools: tools, Params: params,
	})
	if err != nil {
		return nil, convert.ToStatus(err)
	}
	return convert.SessionToProto(s.State()), nil
}

func (a *agentService) GetSession(ctx context.Context, req *agentdv1.GetSessionRequest) (*agentdv1.Session, error) {
	s, err := a.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	st, err := s.Snapshot(ctx)
	if err != nil {
		return nil, convert.ToStatus(err)
	}
	return convert.SessionToProto(st), nil
}

const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

func pageSize(field string, n int32, def int) (int, error) {
	switch {
	case n < 0:
		return 0, convert.InvalidArg(field, "must be >= 0, got %d", n)
	case n == 0:
		return def, nil
	default:
		return min(int(n), maxPageSize), nil
	}
}

func (a *agentService) ListSessions(ctx context.Context, req *agentdv1.ListSessionsRequest) (*agentdv1.ListSessionsResponse, error) {
	n, err := pageSize("page_size", req.GetPageSize(), defaultPageSize)
	if err != nil {
		return nil, err
	}
	tenant := tenantOf(ctx)
	after, err := a.openPage(tenant, "sessions", req.GetPageToken())
	if err != nil {
		return nil, err
	}
	list, next, err := a.sessions.List(ctx, tenant, n, after)
	if err != nil {
		return nil, convert.ToStatus(err)
	}
	resp := &agentdv1.ListSessionsResponse{}
	size := 0
	for i, s := range list {
		st, err := s.Snapshot(ctx)
		if err != nil {
			return nil, convert.ToStatus(err)
		}
		p := convert.SessionToProto(st)
		if sz := proto.Size(p); i > 0 && size+sz > maxPageBytes {
			next = session.PageTokenAfter(list[i-1])
			break
		} else {
			size += sz
		}
		resp.Sessions = append(resp.Sessions, p)
	}
	resp.NextPageToken = a.pages.Seal(tenant, "sessions", next)
	return resp, nil
}

// openPage is the engine's position of a page token of tenant's listing.
func (a *agentService) openPage(tenant, listing, token string) (string, error) {
	if token == "" {
		return "", nil
	}
	raw, ok := a.pages.Open(tenant, listing, token)
	if !ok {
		return "", convert.InvalidArg("page_token", "%q is not a token this server issued for this listing", convert.Clip(token))
	}
	return raw, nil
}

func (a *agentService) DeleteSession(ctx context.Context, req *agentdv1.DeleteSessionRequest) (*agentdv1.DeleteSessionResponse, error) {
	if _, err := a.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := a.sessions.Delete(ctx, tenantOf(ctx), req.GetSessionId()); err != nil {
		return nil, convert.ToStatus(err)
	}
	return &agentdv1.DeleteSessionResponse{}, nil
}

func (a *agentService) Prompt(req *agentdv1.PromptRequest, stream grpc.ServerStreamingServer[agentdv1.Event]) error {
	ctx := stream.Context()
	s, err := a.lookup(ctx, req.GetSessionId(), a.sessions.GetToPrompt)
	if err != nil {
		return err
	}
	params, err := convert.ParamsFromProto(req.GetParams())
	if err != nil {
		return err
	}
	promptID, sub, err := s.PromptWith(ctx, req.GetText(), session.PromptOptions{Params: params})
	if err != nil {
		return convert.ToStatus(err)
	}
	defer sub.Close()
	// The stream ends with this prompt's prompt_end. A client that goes away
	// does not stop the prompt (it can follow it with StreamEvents), unless
	// it asked for that: cancel_on_disconnect.
	err = a.forward(ctx, sub, stream, true, func(e *session.Event) bool {
		return e.Type == session.EventPromptEnd && e.PromptID == promptID
	})
	if req.GetCancelOnDisconnect() && ctx.Err() != nil && a.drain.Err() == nil {
		// The stream's context ended before the handler returned: the
		// client cancelled or its connection went (not the server draining).
		s.CallerGone(promptID)
	}
	return err
}

func (a *agentService) StreamEvents(req *agentdv1.StreamEventsRequest, stream grpc.ServerStreamingServer[agentdv1.Event]) error {
	tenant := tenantOf(stream.Context())
	if err := a.followers.take(tenant); err != nil {
		return err
	}
	defer a.followers.put(tenant)
	// Subscribed in a call of its own, so that its frame is gone while the
	// stream is served (an idle reader's goroutine fits a smaller stack).
	sub, err := a.subscribe(stream.Context(), req)
	if err != nil {
		return err
	}
	defer sub.Close()
	err = a.forward(stream.Context(), sub, stream, false, func(*session.Event) bool { return false })
	if errors.Is(err, errLogClosed) {
		return a.logClosed(stream.Context(), req.GetSessionId())
	}
	return err
}

var (
	// errLogClosed: forward's subscription ended with the session's event
	// log (not a prompt's stream).
	errLogClosed = errors.New("event log closed")
	// errDrained ends forward's wait for an event when the server drains.
	errDrained = errors.New("server draining")
)

// logClosed is how StreamEvents ends when the session's event log closed:
// with NOT_FOUND when the session is gone (deleted here or on another
// replica), so that the reader learns why instead of seeing a bare end of
// stream; cleanly when it still exists (the server drains: the stream ends
// after its last event).
func (a *agentService) logClosed(ctx context.Context, id string) error {
	if _, err := a.session(ctx, id); status.Code(err) == codes.NotFound {
		return status.Errorf(codes.NotFound, "session %s was deleted; its event stream has ended", id)
	}
	return nil
}

// subscribe is StreamEvents' subscription. With sessions in Redis it calls
// the store, and go-redis' calls run deep: it is then made on a short-lived
// goroutine, so that the stream's own, which waits for events for as long
// as the reader stays (hours, for an idle one), keeps a small stack.
func (a *agentService) subscribe(ctx context.Context, req *agentdv1.StreamEventsRequest) (*session.Subscription, error) {
	if !a.sessions.Shared() {
		return a.subscribeHere(ctx, req)
	}
	var sub *session.Subscription
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		sub, err = a.subscribeHere(ctx, req)
	}()
	<-done
	return sub, err
}

// lastEventIDKey is the metadata the gateway forwards an SSE reconnect's
// Last-Event-ID header as.
const lastEventIDKey = "last-event-id"

//go:noinline
func (a *agentService) subscribeHere(ctx context.Context, req *agentdv1.StreamEventsRequest) (*session.Subscription, error) {
	s, err := a.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	after := req.GetAfterSeq()
	if after == 0 {
		// SSE reconnects carry Last-Event-ID (forwarded as metadata).
		if v := metadata.ValueFromIncomingContext(ctx, lastEventIDKey); len(v) > 0 && v[0] != "" {
			n, err := strconv.ParseUint(strings.TrimSpace(v[0]), 10, 64)
			if err != nil {
				return nil, convert.InvalidArg("Last-Event-ID", "%q is not an event seq", v[0])
			}
			after = n
		}
	}
	sub, err := s.Subscribe(ctx, after)
	if err != nil {
		var dropped *session.DroppedError
		if errors.As(err, &dropped) || errors.Is(err, session.ErrUnavailable) {
			return nil, convert.ToStatus(err)
		}
		return nil, convert.InvalidArg("after_seq", "%v", err)
	}
	return sub, nil
}

// forward sends events until last reports the final one, the client goes
// away, the log closes or the server drains. A stream served natively over
// SSE (sse_stream.go) gets its events as shared SSE frames and its pings
// from this loop: no goroutine of its own.
func (a *agentService) forward(ctx context.Context, sub *session.Subscription, stream grpc.ServerStreamingServer[agentdv1.Event], prompt bool, last func(*session.Event) bool) error {
	// The wait for an event ends with the stream's context, or with the
	// server's drain through a callback (no goroutine per stream, and no
	// context of its own: the wait stays on two channels).
	defer context.AfterFunc(a.drain, func() { sub.Interrupt(errDrained) })()
	next := sub.NextRef
	var protos *convert.Events // a gRPC stream's, on its first event
	sse := sseStreamOf(stream.Context())
	if sse != nil {
		var stop func()
		next, stop = sse.pinging(sub)
		defer stop()
	}
	for {
		e, err := next(ctx)
		switch {
		case errors.Is(err, session.ErrLogClosed) && prompt:
			// The session went away before its prompt ended.
			return status.Error(codes.Unavailable, "the session was deleted or the server stopped before the prompt ended")
		case errors.Is(err, session.ErrLogClosed):
			return errLogClosed
		case errors.Is(err, errDrained):
			return status.Error(codes.Unavailable, "server is shutting down; resume with after_seq")
		case err != nil:
			return convert.ToStatus(err)
		}
		if sse != nil {
			// Through the interceptors' stream (metrics count it) to the
			// SSE response, which encodes it once for all its readers.
			err = stream.SendMsg(e)
		} else {
			if protos == nil {
				protos = new(convert.Events)
			}
			err = stream.Send(protos.Proto(e))
		}
		if err != nil {
			return err
		}
		if last(e) {
			return nil
		}
	}
}

func (a *agentService) Abort(ctx context.Context, req *agentdv1.AbortRequest) (*agentdv1.AbortResponse, error) {
	s, err := a.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if err := s.Abort(ctx); err != nil {
		return nil, convert.ToStatus(err)
	}
	return &agentdv1.AbortResponse{}, nil
}

func (a *agentService) AbortRetry(ctx context.Context, req *agentdv1.AbortRetryRequest) (*agentdv1.AbortRetryResponse, error) {
	s, err := a.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if err := s.AbortRetry(ctx); err != nil {
		return nil, convert.ToStatus(err)
	}
	return &agentdv1.AbortRetryResponse{}, nil
}

func (a *agentService) SetAutoRetry(ctx context.Context, req *agentdv1.SetAutoRetryRequest) (*agentdv1.SetAutoRetryResponse, error) {
	s, err := a.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	if err := s.SetAutoRetry(ctx, req.GetEnabled()); err != nil {
		return nil, convert.ToStatus(err)
	}
	return &agentdv1.SetAutoRetryResponse{Enabled: req.GetEnabled()}, nil
}

func (a *agentService) ListMessages(ctx context.Context, req *agentdv1.ListMessagesRequest) (*agentdv1.ListMessagesResponse, error) {
	s, err := a.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	n, err := pageSize("page_size", req.GetPageSize(), 100)
	if err != nil {
		return nil, err
	}
	tenant, listing := tenantOf(ctx), "messages\x00"+s.ID()
	raw, err := a.openPage(tenant, listing, req.GetPageToken())
	if err != nil {
		return nil, err
	}
	offset := 0
	if raw != "" {
		v, err := strconv.Atoi(strings.TrimPrefix(raw, "m"))
		if err != nil || v < 0 || !strings.HasPrefix(raw, "m") {
			return nil, convert.InvalidArg("page_token", "is not a token this server issued for this listing")
		}
		offset = v
	}
	entries, total, err := s.Messages(ctx, offset, n)
	if err != nil {
		return nil, convert.ToStatus(err)
	}
	resp := &agentdv1.ListMessagesResponse{}
	size := 0
	for i, e := range entries {
		p := convert.EntryToProto(e)
		if sz := proto.Size(p); i > 0 && size+sz > maxPageBytes {
			break
		} else {
			size += sz
		}
		resp.Messages = append(resp.Messages, p)
	}
	if len(resp.Messages) < total-offset {
		resp.NextPageToken = a.pages.Seal(tenant, listing, session.MessagesTokenAfter(offset, len(resp.Messages)))
	}
	return resp, nil
}

func (a *agentService) SubmitToolResults(ctx context.Context, req *agentdv1.SubmitToolResultsRequest) (*agentdv1.SubmitToolResultsResponse, error) {
	s, err := a.session(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	results := make([]session.ToolResult, 0, len(req.GetResults()))
	for _, r := range req.GetResults() {
		results = append(results, session.ToolResult{CallID: r.GetCallId(), Content: r.GetContent(), IsError: r.GetIsError()})
	}
	if err := s.SubmitToolResults(ctx, results); err != nil {
		return nil, convert.ToStatus(err)
	}
	return &agentdv1.SubmitToolResultsResponse{}, nil
}
