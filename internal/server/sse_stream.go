package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/server/convert"
	"github.com/agentd/agentd/internal/server/sse"
	"github.com/agentd/agentd/internal/session"
)

// Native SSE. POST /v1/sessions/{id}:prompt and GET /v1/sessions/{id}/events
// asked for as text/event-stream are served here, in the HTTP handler's own
// goroutine, without the gateway's in-process gRPC call:
//
//   - the request is read as the generated gateway handler reads it (the
//     same runtime functions: AnnotateContext for the metadata, the inbound
//     marshaler for the prompt's body, PopulateQueryParameters for the
//     events' query), and refused with the gateway's error handler where the
//     gateway refuses it;
//   - the gRPC server's stream interceptors (metrics, then auth: bearer
//     tokens and stream grants) and the AgentService method run as plain
//     calls on an sseStream, a grpc.ServerStream that writes SSE frames;
//   - the service's forward loop pings the stream after
//     http.sse_heartbeat_ms of silence (no heartbeat goroutine), and hands it
//     session events, encoded once for all the native SSE readers of a
//     session on this replica (frameCache);
//   - what the gRPC hop did to a request or an error is reproduced where it
//     shows: the status a handler error becomes, the receive limit
//     (limits.max_request_bytes), what the gateway's client refused to send
//     (metadata gRPC does not carry, a passed deadline, a string that is not
//     UTF-8; see sendable in rest_native.go).
//
// The wire answer is the gateway's: the same headers, the same status and
// body for an error before the first event, the same frames, the same
// "event: error" frame for an error after it.

// nativeRoute is one of the two streaming RPCs served natively.
type nativeRoute struct {
	pattern string // the HTTP rule's path pattern
	info    *grpc.StreamServerInfo
	handler grpc.StreamHandler // the generated handler: RecvMsg, then the service method
}

var (
	promptRoute = nativeRoute{pattern: "/v1/sessions/{session_id}:prompt",
		info:    &grpc.StreamServerInfo{FullMethod: agentdv1.AgentService_Prompt_FullMethodName, IsServerStream: true},
		handler: streamHandler("Prompt")}
	eventsRoute = nativeRoute{pattern: "/v1/sessions/{session_id}/events",
		info:    &grpc.StreamServerInfo{FullMethod: agentdv1.AgentService_StreamEvents_FullMethodName, IsServerStream: true},
		handler: streamHandler("StreamEvents")}

	// eventsQueryFilter keeps the path's session_id out of the query, as the
	// generated gateway handler's filter does.
	eventsQueryFilter = utilities.NewDoubleArray([][]string{{"session_id"}})
)

func streamHandler(name string) grpc.StreamHandler {
	for _, d := range agentdv1.AgentService_ServiceDesc.Streams {
		if d.StreamName == name {
			return d.Handler
		}
	}
	panic("agentd.v1.AgentService has no stream " + name)
}

// streamChain runs a stream handler through interceptors, as
// grpc.ChainStreamInterceptor does, the first one outermost.
type streamChain []grpc.StreamServerInterceptor

// bind composes the chain around h, for calls of info: a call goes through
// one closure per interceptor, as the gRPC server's chain does.
func (c streamChain) bind(info *grpc.StreamServerInfo, h grpc.StreamHandler) grpc.StreamHandler {
	for i := len(c) - 1; i >= 0; i-- {
		next, ic := h, c[i]
		h = func(srv any, ss grpc.ServerStream) error { return ic(srv, ss, info, next) }
	}
	return h
}

// nativeSSE reports whether r (a prompt or events route, already checked)
// is served natively, and its inbound marshaler. The others go to the
// gateway: the answer is not an event stream there (no Accept value is
// exactly text/event-stream), or the gateway reads the path or the method
// in its own way (an escaped path, X-HTTP-Method-Override).
func (a *webAPI) nativeSSE(r *http.Request) (runtime.Marshaler, bool) {
	if r.URL.RawPath != "" || headerValue(r.Header, "X-Http-Method-Override") != "" {
		return nil, false
	}
	inbound, outbound := runtime.MarshalerForRequest(a.gw, r)
	if m, ok := outbound.(*sse.Marshaler); !ok || m != a.sse {
		return nil, false
	}
	if a.viaGateway != nil && a.viaGateway(r) {
		return nil, false
	}
	return inbound, true
}

// servePrompt serves POST /v1/sessions/{id}:prompt as an event stream.
func (a *webAPI) servePrompt(w http.ResponseWriter, r *http.Request, inbound runtime.Marshaler, sessionID string) {
	a.serveNative(w, r, &promptRoute, func() (proto.Message, error) {
		var req agentdv1.PromptRequest
		if err := decodePrompt(r, inbound, &req); err != nil {
			return nil, err
		}
		req.SessionId = sessionID
		return &req, nil
	})
}

// serveEvents serves GET /v1/sessions/{id}/events as an event stream.
func (a *webAPI) serveEvents(w http.ResponseWriter, r *http.Request, sessionID string) {
	a.serveNative(w, r, &eventsRoute, func() (proto.Message, error) {
		req := &agentdv1.StreamEventsRequest{SessionId: sessionID}
		if err := r.ParseForm(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%v", err)
		}
		if err := runtime.PopulateQueryParameters(req, r.Form, eventsQueryFilter); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%v", err)
		}
		return req, nil
	})
}

// serveNative is the generated gateway handler and runtime.ForwardResponseStream
// of route, with the service called in place of the gRPC client. read reads
// the request.
func (a *webAPI) serveNative(w http.ResponseWriter, r *http.Request, route *nativeRoute, read func() (proto.Message, error)) {
	// Prepared in a call of its own (see ServeHTTP): its frame is gone
	// while the stream is served.
	s, done := a.prepareNative(w, r, route, read)
	if s == nil {
		return
	}
	defer done()
	h := a.eventsHandler
	if route == &promptRoute {
		h = a.promptHandler
	}
	err := h(a.agent, s)
	s.finish(err)
}

// prepareNative reads the request and builds the stream serveNative serves
// (nil when it answered with an error already); done releases what the
// stream holds.
//
//go:noinline
func (a *webAPI) prepareNative(w http.ResponseWriter, r *http.Request, route *nativeRoute, read func() (proto.Message, error)) (*sseStream, func()) {
	sse.SetHeaders(w.Header()) // as sse.Headers
	// r's context ends when this handler returns: no cancel of its own
	// (the gateway's was for its gRPC call).
	ctx := r.Context()
	actx, err := runtime.AnnotateContext(ctx, a.gw, r, route.info.FullMethod, runtime.WithHTTPPathPattern(route.pattern))
	if err != nil {
		runtime.HTTPError(ctx, a.gw, a.sse, w, r, err)
		return nil, nil
	}
	actx = runtime.NewServerMetadataContext(actx, runtime.ServerMetadata{})
	req, err := read()
	var outgoing metadata.MD
	if err == nil {
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		// What the gateway's gRPC client refused to send.
		outgoing, _ = metadata.FromOutgoingContext(actx)
		err = sendable(actx, outgoing, req)
	}
	if err != nil {
		runtime.HTTPError(actx, a.gw, a.sse, w, r, err)
		return nil, nil
	}

	// What the service sees: the gateway's metadata as incoming metadata, and
	// its deadline (Grpc-Timeout); no outgoing metadata.
	sctx, cancelDeadline := serverContext(ctx, actx, outgoing)
	// runtime.ForwardResponseStream sets it before reading the stream: an
	// error before the first event is sent chunked too.
	w.Header()["Transfer-Encoding"] = []string{"chunked"}
	s := &sseStream{w: w, rc: http.NewResponseController(w), m: a.sse, req: req, maxRecv: a.maxBody,
		heartbeat: a.heartbeat, last: time.Now(), frames: a.frames, spawn: a.agent.sessions.Go}
	s.ctx = context.WithValue(sctx, sseStreamKey{}, s)
	return s, func() {
		s.shared.leave() // joined on the first event
		cancelDeadline()
	}
}

type sseStreamKey struct{}

// sseStreamOf returns the native SSE stream a service call writes to, or nil
// (a gRPC call).
func sseStreamOf(ctx context.Context) *sseStream {
	s, _ := ctx.Value(sseStreamKey{}).(*sseStream)
	return s
}

// sseStream is the grpc.ServerStream of a streaming RPC served natively: it
// hands the handler its request and writes what it sends as SSE frames. It
// is used by the HTTP handler's goroutine only.
type sseStream struct {
	ctx       context.Context
	w         http.ResponseWriter
	rc        *http.ResponseController
	m         *sse.Marshaler
	req       proto.Message // until RecvMsg takes it
	maxRecv   int64         // the gRPC server's receive limit
	heartbeat time.Duration
	frames    *frameCache
	spawn     func(func()) // runs the first write (session.Manager.Go)

	committed bool           // the status line and headers are set
	flushed   bool           // and written
	last      time.Time      // of the last write
	buf       []byte         // the frames of a reader that shares none
	protos    convert.Events // the API form of the event being framed
	shared    *sessionFrames // joined on the first event
	// sub is the subscription forward reads (nil: every write is
	// flushed). While it holds events taken from the log in one batch, a
	// frame is written but not flushed: one flush (one write syscall) per
	// burst of ready frames. The last of a batch is flushed at once; no
	// frame waits for one that is not there yet.
	sub *session.Subscription
}

var _ grpc.ServerStream = (*sseStream)(nil)

func (s *sseStream) Context() context.Context     { return s.ctx }
func (s *sseStream) SetHeader(metadata.MD) error  { return nil }
func (s *sseStream) SendHeader(metadata.MD) error { return nil }
func (s *sseStream) SetTrailer(metadata.MD)       {}

// RecvMsg hands over the request once, as the gRPC server would have
// received it.
func (s *sseStream) RecvMsg(m any) error {
	req := s.req
	s.req = nil
	return recvOnce(req, m, s.maxRecv)
}

// SendMsg writes one event's frame: a *session.Event from forward (shared
// frames), or an *agentdv1.Event.
func (s *sseStream) SendMsg(m any) error {
	var frame []byte
	var err error
	switch ev := m.(type) {
	case *session.Event:
		frame, err = s.sessionFrame(ev)
	case *agentdv1.Event:
		frame, err = s.frame(s.buf[:0], ev)
		s.buf = frame
	default:
		return status.Errorf(codes.Internal, "sse: cannot send %T", m)
	}
	if err != nil {
		return err
	}
	if !s.committed {
		// As runtime.ForwardResponseStream on the first message, with the
		// gRPC response's header metadata that the gateway forwarded.
		// (h.Set, the keys canonical already.)
		h := s.w.Header()
		h["Grpc-Metadata-Content-Type"] = []string{"application/grpc"}
		h["Content-Type"] = []string{sse.ContentType}
		s.committed = true
	}
	return s.write(frame, true)
}

// sessionFrame returns e's frame, shared with the session's other native
// SSE readers when it has some.
func (s *sseStream) sessionFrame(e *session.Event) ([]byte, error) {
	if s.shared == nil && s.frames != nil {
		s.shared = s.frames.join(e.SessionID)
	}
	if f := s.shared.lookup(e); f != nil {
		return f, nil
	}
	if !s.shared.active() {
		frame, err := s.frame(s.buf[:0], s.protos.Proto(e))
		s.buf = frame
		return frame, err
	}
	frame, err := s.frame(nil, s.protos.Proto(e))
	if err == nil {
		s.shared.store(e, frame)
	}
	return frame, err
}

// frame appends ev's frame and its delimiter to dst.
func (s *sseStream) frame(dst []byte, ev *agentdv1.Event) ([]byte, error) {
	frame, err := s.m.AppendEvent(dst, ev)
	if err != nil {
		// The gRPC server refused to encode it first (a string that is not
		// UTF-8), with this error.
		if _, perr := proto.Marshal(ev); perr != nil {
			return nil, marshalErr(perr)
		}
		return nil, err
	}
	return append(frame, sse.Delimiter...), nil
}

// write writes p and flushes it, unless more frames of the same burst
// follow (see sub). A frame's delimiter is written on its own, as the
// gateway wrote it: a frame longer than net/http's chunk buffer goes out as
// the same two chunks.
func (s *sseStream) write(p []byte, frame bool) error {
	flush := s.sub == nil || s.sub.Buffered() == 0
	if !s.flushed && flush {
		// The first flush sends the header too, and net/http's header
		// writer takes about 4.5 KiB of stack: done on another goroutine
		// (the handler's waits for it, so the response is never used by
		// two at once), the handler's goroutine, on which an idle stream
		// waits for hours, keeps an 8 KiB stack instead of 16. That
		// goroutine is one the sessions keep for their runs (a new one's
		// stack was grown and copied for every stream: ≈ 2.5 % of the
		// instructions of a prompt). Frames before it stay in the
		// response's buffer (the header is written when that is flushed,
		// or when a frame overflows it), so a prompt's first events, taken
		// in one batch, go out in one write.
		s.flushed = true
		errc := make(chan error, 1)
		s.spawn(func() { errc <- s.writeOut(p, frame, true) })
		return <-errc
	}
	return s.writeOut(p, frame, flush)
}

func (s *sseStream) writeOut(p []byte, frame, flush bool) error {
	if frame {
		n := len(p) - len(sse.Delimiter)
		if _, err := s.w.Write(p[:n]); err != nil {
			return clientGone(err)
		}
		p = p[n:]
	}
	if _, err := s.w.Write(p); err != nil {
		return clientGone(err)
	}
	if flush {
		if err := s.rc.Flush(); err != nil {
			return clientGone(err)
		}
	}
	s.last = time.Now()
	return nil
}

// clientGone is a failed write: the client went away (the gRPC stream of
// the gateway ended as Canceled then).
func clientGone(err error) error {
	return fmt.Errorf("sse: %w: %w", context.Canceled, err)
}

// ping writes a heartbeat comment; the first one sends the headers, as
// heartbeatWriter does.
func (s *sseStream) ping() error {
	if !s.committed {
		s.w.Header()["Content-Type"] = []string{sse.ContentType}
		s.w.WriteHeader(http.StatusOK)
		s.committed = true
	}
	return s.write([]byte(": ping\n\n"), false)
}

// pinging returns sub.NextRef for forward: while it waits, the stream is
// pinged after each heartbeat interval of silence. The timer is re-armed
// only when it has passed (at most once per interval), not per event; it
// ends the wait through sub.Interrupt (the wait stays on the reader's two
// channels); done stops it.
//
// No timer writes: the timer only ends the wait, and the ping is written
// here, by the handler's goroutine.
func (s *sseStream) pinging(sub *session.Subscription) (next func(context.Context) (*session.Event, error), done func()) {
	s.sub = sub
	var t *time.Timer
	var due time.Time // when t fires; zero: not armed
	next = func(ctx context.Context) (*session.Event, error) {
		for {
			if !due.IsZero() && !time.Now().Before(due) {
				// It fired, whether or not its wake-up ended a wait (one
				// that ended with an event instead is told at the next).
				due = time.Time{}
			}
			if due.IsZero() {
				due = s.last.Add(s.heartbeat)
				if t == nil {
					t = time.AfterFunc(time.Until(due), func() { sub.Interrupt(errHeartbeat) })
				} else {
					t.Reset(time.Until(due))
				}
			}
			e, err := sub.NextRef(ctx)
			if !errors.Is(err, errHeartbeat) || errors.Is(err, errDrained) {
				// An event, or the end of the wait forward handles (the
				// drain's, even when it came with the timer's).
				return e, err
			}
			due = time.Time{}
			// The timer may be stale (a frame was written since it was
			// armed): ping only after a full interval of silence.
			if time.Since(s.last) >= s.heartbeat {
				if err := s.ping(); err != nil {
					return nil, err
				}
			}
		}
	}
	return next, func() {
		if t != nil {
			t.Stop()
		}
	}
}

// errHeartbeat ends a native SSE stream's wait for an event when its
// heartbeat interval has passed.
var errHeartbeat = errors.New("heartbeat due")

// finish ends the response after the handler returned err, as
// runtime.ForwardResponseStream does with the stream's end or error.
func (s *sseStream) finish(err error) {
	if err == nil {
		return
	}
	// The status the gRPC server made of the handler's error, as the
	// gateway's client received it.
	st, _ := overTheWire(err)
	if !s.committed {
		s.w.Header()["Content-Type"] = []string{sse.ContentType}
		s.w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
		s.committed = true
	}
	frame, merr := s.m.AppendError(s.buf[:0], st.Proto())
	if merr != nil {
		return
	}
	if _, err := s.w.Write(frame); err == nil {
		_, _ = s.w.Write(sse.Delimiter)
	}
}

// frameCache shares encoded event frames between the native SSE readers of
// a session on this replica: with n readers an event is encoded once, not n
// times. A session's frames are kept only while it has two readers or more.
type frameCache struct {
	mu       sync.Mutex
	sessions map[string]*sessionFrames
	// peak is the most sessions has held since it was last copied
	// smaller: Go's maps keep their buckets as entries go, and 10 000
	// readers that left would leave theirs (1.5 MiB).
	peak int
}

// frameSlots is how many recent events a session's cache holds: readers of
// a live stream are a few events apart, a burst may spread them further.
const frameSlots = 64

type sessionFrames struct {
	cache   *frameCache
	id      string
	readers atomic.Int32 // written under cache.mu

	mu    sync.Mutex
	slots *[frameSlots]cachedFrame // while there are two readers or more
}

type cachedFrame struct {
	ev    session.Event // the event the frame is of: a slot serves an equal event only
	frame []byte
}

func newFrameCache() *frameCache {
	return &frameCache{sessions: map[string]*sessionFrames{}}
}

// join registers a reader of sessionID's events.
func (c *frameCache) join(sessionID string) *sessionFrames {
	c.mu.Lock()
	defer c.mu.Unlock()
	sf := c.sessions[sessionID]
	if sf == nil {
		sf = &sessionFrames{cache: c, id: sessionID}
		c.sessions[sessionID] = sf
	}
	sf.readers.Add(1)
	return sf
}

// leave unregisters a reader; the frames go with the next to last.
func (sf *sessionFrames) leave() {
	if sf == nil {
		return
	}
	c := sf.cache
	c.mu.Lock()
	n := sf.readers.Add(-1)
	if n == 0 {
		c.peak = max(c.peak, len(c.sessions))
		delete(c.sessions, sf.id)
		if c.peak >= 1024 && len(c.sessions) <= c.peak/4 {
			small := make(map[string]*sessionFrames, len(c.sessions)) // not maps.Clone: it keeps the size
			for id, f := range c.sessions {
				small[id] = f
			}
			c.sessions, c.peak = small, len(c.sessions)
		}
	}
	c.mu.Unlock()
	if n <= 1 {
		sf.mu.Lock()
		sf.slots = nil
		sf.mu.Unlock()
	}
}

// active reports whether frames are shared: two readers or more.
func (sf *sessionFrames) active() bool {
	return sf != nil && sf.readers.Load() > 1
}

// lookup returns e's shared frame, or nil.
func (sf *sessionFrames) lookup(e *session.Event) []byte {
	if !sf.active() {
		return nil
	}
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if sf.slots == nil {
		return nil
	}
	if c := &sf.slots[e.Seq%frameSlots]; c.frame != nil && c.ev == *e {
		return c.frame
	}
	return nil
}

// store keeps e's frame for the other readers.
func (sf *sessionFrames) store(e *session.Event, frame []byte) {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if !sf.active() {
		return
	}
	if sf.slots == nil {
		sf.slots = new([frameSlots]cachedFrame)
	}
	c := &sf.slots[e.Seq%frameSlots]
	if c.frame != nil && c.ev.Seq > e.Seq {
		return // a late reader does not evict a newer event
	}
	c.ev, c.frame = *e, frame
}
