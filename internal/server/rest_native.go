package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/server/convert"
)

// Native REST. The JSON routes of the per-prompt path, POST /v1/sessions,
// GET and DELETE /v1/sessions/{id}, and the prompt start (POST …:prompt
// with Accept: application/json or ?stream=false), are served here, in the
// HTTP handler's goroutine, without the gateway's in-process gRPC call:
//
//   - the request is read as the generated gateway handler reads it (the
//     same runtime functions: AnnotateContext for the metadata, the inbound
//     marshaler for a body, the path's session_id), and refused with the
//     gateway's error handler where the gateway refuses it;
//   - what the gateway's gRPC client checked before a call left it is
//     checked here (sendable): the metadata it sends, its deadline, the
//     request's encoding (proto strings must be UTF-8);
//   - the gRPC server's unary interceptors (metrics, then auth) and the
//     AgentService method run as plain calls, after the server's receive
//     limit (limits.max_request_bytes); the prompt start runs the stream
//     interceptors and the Prompt handler on a stream that takes the first
//     event and ends the call, as the gateway's client did;
//   - an error becomes the status the client received (overTheWire), with
//     the metadata the client reported: none for its own refusals, the
//     trailers (content-type, status details) for the server's; an answer
//     gets the server's header metadata (Grpc-Metadata-Content-Type) and is
//     written by runtime.ForwardResponseMessage with the gateway's
//     marshaler and forward-response options, after the check the server's
//     encoding made (a string that is not UTF-8 is INTERNAL).
//
// The wire answer is the gateway's, byte for byte but for the Date header
// (rest_native_test.go compares them). Requests the gateway reads its own
// way (an escaped path, X-HTTP-Method-Override, an Accept that selects
// another marshaler) stay on the gateway.

// unaryChain runs a unary handler through interceptors, as
// grpc.ChainUnaryInterceptor does, the first one outermost. The gRPC server
// is built with the same values.
type unaryChain []grpc.UnaryServerInterceptor

// bind composes the chain around h, for calls of info: a call goes through
// one closure per interceptor, as the gRPC server's chain does.
func (c unaryChain) bind(info *grpc.UnaryServerInfo, h grpc.UnaryHandler) grpc.UnaryHandler {
	for i := len(c) - 1; i >= 0; i-- {
		next, ic := h, c[i]
		h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
	}
	return h
}

// unaryRoute is one unary RPC served natively.
type unaryRoute struct {
	pattern string // the HTTP rule's path pattern
	method  string // the gRPC method's full name
	// read reads the request as the generated gateway handler does: the
	// body with the inbound marshaler, or the path's session_id.
	read func(r *http.Request, inbound runtime.Marshaler, id string) (proto.Message, error)
	// bind binds the service method within the interceptors.
	bind func(unaryChain, *agentService) grpc.UnaryHandler
}

var (
	createRoute = unaryRoute{pattern: "/v1/sessions", method: agentdv1.AgentService_CreateSession_FullMethodName,
		read: func(r *http.Request, inbound runtime.Marshaler, _ string) (proto.Message, error) {
			var req agentdv1.CreateSessionRequest
			if err := inbound.NewDecoder(r.Body).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
				return nil, status.Errorf(codes.InvalidArgument, "%v", err)
			}
			return &req, nil
		},
		bind: func(c unaryChain, srv *agentService) grpc.UnaryHandler {
			return c.bind(&grpc.UnaryServerInfo{Server: srv, FullMethod: agentdv1.AgentService_CreateSession_FullMethodName},
				func(ctx context.Context, req any) (any, error) {
					return srv.CreateSession(ctx, req.(*agentdv1.CreateSessionRequest))
				})
		}}
	getRoute = unaryRoute{pattern: "/v1/sessions/{session_id}", method: agentdv1.AgentService_GetSession_FullMethodName,
		read: func(_ *http.Request, _ runtime.Marshaler, id string) (proto.Message, error) {
			return &agentdv1.GetSessionRequest{SessionId: id}, nil
		},
		bind: func(c unaryChain, srv *agentService) grpc.UnaryHandler {
			return c.bind(&grpc.UnaryServerInfo{Server: srv, FullMethod: agentdv1.AgentService_GetSession_FullMethodName},
				func(ctx context.Context, req any) (any, error) {
					return srv.GetSession(ctx, req.(*agentdv1.GetSessionRequest))
				})
		}}
	deleteRoute = unaryRoute{pattern: "/v1/sessions/{session_id}", method: agentdv1.AgentService_DeleteSession_FullMethodName,
		read: func(_ *http.Request, _ runtime.Marshaler, id string) (proto.Message, error) {
			return &agentdv1.DeleteSessionRequest{SessionId: id}, nil
		},
		bind: func(c unaryChain, srv *agentService) grpc.UnaryHandler {
			return c.bind(&grpc.UnaryServerInfo{Server: srv, FullMethod: agentdv1.AgentService_DeleteSession_FullMethodName},
				func(ctx context.Context, req any) (any, error) {
					return srv.DeleteSession(ctx, req.(*agentdv1.DeleteSessionRequest))
				})
		}}
)

// unaryHandlers are the native unary routes' handlers, within the gRPC
// server's unary interceptors.
type unaryHandlers map[*unaryRoute]grpc.UnaryHandler

func newUnaryHandlers(c unaryChain, srv *agentService) unaryHandlers {
	h := unaryHandlers{}
	for _, r := range []*unaryRoute{&createRoute, &getRoute, &deleteRoute} {
		h[r] = r.bind(c, srv)
	}
	return h
}

// unaryRouteOf is the native unary route of r's method and path, if any,
// with the path's session_id.
func unaryRouteOf(r *http.Request) (*unaryRoute, string) {
	switch r.Method {
	case http.MethodPost:
		if r.URL.Path == "/v1/sessions" {
			return &createRoute, ""
		}
	case http.MethodGet, http.MethodDelete:
		if id, ok := sessionRoute(r.URL.Path, ""); ok {
			if r.Method == http.MethodGet {
				return &getRoute, id
			}
			return &deleteRoute, id
		}
	}
	return nil, ""
}

// nativeJSON reports whether r (a native unary route) is served natively,
// and its inbound marshaler: not when the gateway reads the path or the
// method in its own way (an escaped path, X-HTTP-Method-Override), nor when
// the Accept header selects another marshaler than the JSON one.
func (a *webAPI) nativeJSON(r *http.Request) (runtime.Marshaler, bool) {
	if r.URL.RawPath != "" || headerValue(r.Header, "X-Http-Method-Override") != "" {
		return nil, false
	}
	inbound, outbound := runtime.MarshalerForRequest(a.gw, r)
	if outbound != a.json {
		return nil, false
	}
	if a.viaGateway != nil && a.viaGateway(r) {
		return nil, false
	}
	return inbound, true
}

// serveUnary is the generated gateway handler of route, with the service
// called in place of the gRPC client.
func (a *webAPI) serveUnary(w http.ResponseWriter, r *http.Request, route *unaryRoute, id string, inbound runtime.Marshaler) {
	// r's context ends when this handler returns: no cancel of its own
	// (the gateway's was for its gRPC call).
	ctx := r.Context()
	actx, err := runtime.AnnotateContext(ctx, a.gw, r, route.method, runtime.WithHTTPPathPattern(route.pattern))
	if err != nil {
		runtime.HTTPError(ctx, a.gw, a.json, w, r, err)
		return
	}
	resp, md, err := a.callUnary(actx, r, route, id, inbound)
	actx = runtime.NewServerMetadataContext(actx, md)
	if err != nil {
		runtime.HTTPError(actx, a.gw, a.json, w, r, err)
		return
	}
	a.forwardJSON(actx, w, r, resp)
}

// callUnary is the generated request_AgentService_*_0 function and the
// gRPC hop: the request read, what the client and the server checked, the
// interceptors and the method, and the metadata the client reported.
func (a *webAPI) callUnary(actx context.Context, r *http.Request, route *unaryRoute, id string, inbound runtime.Marshaler) (proto.Message, runtime.ServerMetadata, error) {
	var md runtime.ServerMetadata
	req, err := route.read(r, inbound, id)
	if err != nil {
		return nil, md, err
	}
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	outgoing, _ := metadata.FromOutgoingContext(actx)
	if err := sendable(actx, outgoing, req); err != nil {
		return nil, md, err
	}
	// The server read the message within its receive limit before the
	// interceptors ran.
	if n := proto.Size(req); int64(n) > a.maxBody {
		st, trailer := overTheWire(tooLargeErr(n, a.maxBody))
		return nil, runtime.ServerMetadata{TrailerMD: trailer}, st.Err()
	}
	sctx, done := serverContext(r.Context(), actx, outgoing)
	resp, err := a.unary[route](sctx, req)
	done()
	if cerr := actx.Err(); cerr != nil {
		// The client's deadline passed (or its caller went away) before the
		// answer: the client's own error.
		return nil, md, status.FromContextError(cerr).Err()
	}
	if err != nil {
		st, trailer := overTheWire(err)
		return nil, runtime.ServerMetadata{TrailerMD: trailer}, st.Err()
	}
	m, ok := resp.(proto.Message)
	if !ok {
		st, trailer := overTheWire(status.Errorf(codes.Internal, "grpc: error while marshaling: %T is not a message", resp))
		return nil, runtime.ServerMetadata{TrailerMD: trailer}, st.Err()
	}
	return m, runtime.ServerMetadata{HeaderMD: grpcHeaderMD}, nil
}

// forwardJSON writes resp as runtime.ForwardResponseMessage does, after the
// gRPC server's encoding of it (which refused a string that is not UTF-8).
// The JSON is encoded once: with no forward-response options (which may
// change resp), the JSON encoding made first, which shows that the server's
// would have passed (protojson refuses what proto.Marshal refuses), is the
// one written.
func (a *webAPI) forwardJSON(ctx context.Context, w http.ResponseWriter, r *http.Request, resp proto.Message) {
	opts := a.gw.GetForwardResponseOptions()
	if len(opts) == 0 {
		if buf, err := a.json.Marshal(resp); err == nil {
			runtime.ForwardResponseMessage(ctx, a.gw, &encodedOnce{Marshaler: a.json, msg: resp, buf: buf}, w, r, resp)
			return
		}
	}
	if !validStrings(resp.ProtoReflect()) {
		if _, err := proto.Marshal(resp); err != nil {
			// The server could not send it: the call failed.
			st, trailer := overTheWire(marshalErr(err))
			ctx = runtime.NewServerMetadataContext(ctx, runtime.ServerMetadata{TrailerMD: trailer})
			runtime.HTTPError(ctx, a.gw, a.json, w, r, st.Err())
			return
		}
	}
	runtime.ForwardResponseMessage(ctx, a.gw, a.json, w, r, resp, opts...)
}

// encodedOnce is a marshaler that answers msg with its encoding buf, and
// encodes anything else with the marshaler it wraps.
type encodedOnce struct {
	runtime.Marshaler
	msg any
	buf []byte
}

func (m *encodedOnce) Marshal(v any) ([]byte, error) {
	if v == m.msg {
		return m.buf, nil
	}
	return m.Marshaler.Marshal(v)
}

// grpcHeaderMD is the header metadata the gateway's client received with
// an answer (the gRPC server sends no other); read only.
var grpcHeaderMD = metadata.MD{"content-type": {"application/grpc"}}

// sendable is what the gateway's gRPC client checked before a call left it,
// in its order: the metadata it sends, its deadline, the request's
// encoding.
func sendable(ctx context.Context, md metadata.MD, req proto.Message) error {
	if err := validateMetadata(md); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= 0 {
		return status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	if !validRequestStrings(req) {
		if _, err := proto.Marshal(req); err != nil {
			return marshalErr(err)
		}
	}
	return nil
}

// marshalErr is gRPC's error for a message it cannot encode.
func marshalErr(err error) error {
	return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err.Error())
}

// tooLargeErr is the gRPC server's refusal of a message over its receive
// limit.
func tooLargeErr(n int, limit int64) error {
	return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, limit)
}

// validateMetadata refuses metadata that gRPC does not send: a key outside
// [0-9a-z-_.], a value (but a -bin key's) outside printable ASCII. The
// messages are gRPC's.
func validateMetadata(md metadata.MD) error {
	for k, vals := range md {
		if k == "" {
			return errors.New("there is an empty key in the header")
		}
		if k[0] == ':' {
			continue
		}
		for i := 0; i < len(k); i++ {
			if c := k[i]; !('a' <= c && c <= 'z') && !('0' <= c && c <= '9') && c != '.' && c != '-' && c != '_' {
				return fmt.Errorf("header key %q contains illegal characters not in [0-9a-z-_.]", k)
			}
		}
		if strings.HasSuffix(k, "-bin") {
			continue
		}
		for _, v := range vals {
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] > 0x7E {
					return fmt.Errorf("header key %q contains value with non-printable ASCII characters", k)
				}
			}
		}
	}
	return nil
}

// serverContext is the context a call's handler sees: ctx's values and
// cancellation, the deadline of the gateway's context actx (Grpc-Timeout),
// and the metadata the gateway sent as incoming metadata (no outgoing).
// done releases its deadline's timer.
func serverContext(ctx, actx context.Context, md metadata.MD) (_ context.Context, done context.CancelFunc) {
	done = func() {}
	if d, ok := actx.Deadline(); ok {
		ctx, done = context.WithDeadline(ctx, d)
	}
	if md != nil {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	return ctx, done
}

// overTheWire is the status a handler's error became for the gateway's
// client, and the trailer metadata it received with it: the status the
// server made of it (a context's error as such), its message as gRPC
// carries it (each byte of it that is not UTF-8 a U+FFFD), or the whole
// status with its details.
func overTheWire(err error) (*status.Status, metadata.MD) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	trailer := metadata.MD{"content-type": {"application/grpc"}}
	if p := st.Proto(); len(p.GetDetails()) > 0 {
		if b, err := proto.Marshal(p); err == nil {
			trailer["grpc-status-details-bin"] = []string{string(b)}
			return st, trailer
		}
	}
	if msg := st.Message(); !utf8.ValidString(msg) {
		var b strings.Builder
		for len(msg) > 0 {
			r, size := utf8.DecodeRuneInString(msg)
			if r == utf8.RuneError && size == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.WriteString(msg[:size])
			}
			msg = msg[size:]
		}
		st = status.New(st.Code(), b.String())
	}
	return st, trailer
}

// validRequestStrings reports whether every string of req is UTF-8 (when
// one is not, proto.Marshal tells whether it may be encoded and why not).
func validRequestStrings(req proto.Message) bool {
	if p, ok := req.(*agentdv1.PromptRequest); ok && p.Params == nil {
		// A prompt's own fields, without reflection (every prompt).
		return utf8.ValidString(p.Text) && utf8.ValidString(p.SessionId)
	}
	return validStrings(req.ProtoReflect())
}

// validStrings reports whether every string field of m, nested ones
// included, is valid UTF-8.
func validStrings(m protoreflect.Message) bool {
	ok := true
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && ok; i++ {
				ok = validValue(fd, l.Get(i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				ok = validValue(fd.MapKey(), k.Value()) && validValue(fd.MapValue(), mv)
				return ok
			})
		default:
			ok = validValue(fd, v)
		}
		return ok
	})
	return ok
}

func validValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return utf8.ValidString(v.String())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return validStrings(v.Message())
	}
	return true
}

// startPrompt starts the prompt (same auth and errors as the streaming
// route) and answers at its first event. The prompt goes on: it does not
// depend on its caller. It runs the Prompt handler within the gRPC
// server's stream interceptors, on a stream that ends the call after the
// first event, as the in-process gRPC call did when it took it.
func (a *webAPI) startPrompt(w http.ResponseWriter, r *http.Request, sessionID string) {
	if a.viaGateway != nil && a.viaGateway(r) {
		a.startPromptViaGRPC(w, r, sessionID)
		return
	}
	ev, err := a.startNative(r, sessionID)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeStarted(w, sessionID, ev.promptID, ev.seq)
}

// startedEvent is what the prompt start answers of the first event.
type startedEvent struct {
	promptID string
	seq      uint64
}

// startNative reads the request and runs the Prompt call to its first
// event.
func (a *webAPI) startNative(r *http.Request, sessionID string) (startedEvent, error) {
	actx, err := runtime.AnnotateContext(r.Context(), a.gw, r, promptRoute.info.FullMethod,
		runtime.WithHTTPPathPattern(promptRoute.pattern))
	if err != nil {
		return startedEvent{}, err
	}
	inbound, _ := runtime.MarshalerForRequest(a.gw, r)
	req := &agentdv1.PromptRequest{}
	if err := decodePrompt(r, inbound, req); err != nil {
		return startedEvent{}, err
	}
	req.SessionId = sessionID
	if req.GetCancelOnDisconnect() {
		return startedEvent{}, convert.InvalidArg("cancel_on_disconnect", "needs a caller that stays: stream the prompt (the start with stream=false answers at once)")
	}
	outgoing, _ := metadata.FromOutgoingContext(actx)
	if err := sendable(actx, outgoing, req); err != nil {
		return startedEvent{}, err
	}
	sctx, done := serverContext(r.Context(), actx, outgoing)
	defer done()
	s := &startStream{req: req, maxRecv: a.maxBody}
	s.ctx, s.cancel = context.WithCancel(sctx)
	defer s.cancel()
	err = a.promptHandler(a.agent, s)
	if s.started {
		return s.first, nil
	}
	if cerr := actx.Err(); cerr != nil {
		return startedEvent{}, status.FromContextError(cerr).Err()
	}
	if err == nil {
		return startedEvent{}, status.Error(codes.Internal, "the prompt ended before its first event")
	}
	st, _ := overTheWire(err)
	return startedEvent{}, st.Err()
}

// startStream is the grpc.ServerStream of a native prompt start: it hands
// the handler its request, takes the first event and then ends the call,
// as the gRPC stream did when its client cancelled after the first event.
type startStream struct {
	ctx     context.Context
	cancel  context.CancelFunc
	req     proto.Message // until RecvMsg takes it
	maxRecv int64
	started bool
	first   startedEvent
}

var _ grpc.ServerStream = (*startStream)(nil)

func (s *startStream) Context() context.Context     { return s.ctx }
func (s *startStream) SetHeader(metadata.MD) error  { return nil }
func (s *startStream) SendHeader(metadata.MD) error { return nil }
func (s *startStream) SetTrailer(metadata.MD)       {}

func (s *startStream) RecvMsg(m any) error {
	req := s.req
	s.req = nil
	return recvOnce(req, m, s.maxRecv)
}

// SendMsg takes the first event and cancels the call; what follows is sent
// to a cancelled stream.
func (s *startStream) SendMsg(m any) error {
	if s.started {
		return status.FromContextError(context.Canceled).Err()
	}
	ev, ok := m.(*agentdv1.Event)
	if !ok {
		return status.Errorf(codes.Internal, "start: cannot send %T", m)
	}
	s.started = true
	s.first = startedEvent{promptID: ev.GetPromptId(), seq: ev.GetSeq()}
	s.cancel()
	return nil
}

// recvOnce hands over a stream's request req (nil: taken already) into m,
// as the gRPC server would have received it: within its receive limit.
func recvOnce(req proto.Message, m any, limit int64) error {
	if req == nil {
		return io.EOF
	}
	if p, ok := req.(*agentdv1.PromptRequest); ok && p.Params == nil && p.ProtoReflect().GetUnknown() == nil {
		// A prompt's own fields, merged as proto.Merge merges them, without
		// reflection (every prompt): its size is under
		// len(text)+len(session_id)+16 (its three fields' tags and lengths
		// take at most 14 bytes).
		if dst, ok := m.(*agentdv1.PromptRequest); ok && int64(len(p.Text)+len(p.SessionId)+16) <= limit {
			if p.SessionId != "" {
				dst.SessionId = p.SessionId
			}
			if p.Text != "" {
				dst.Text = p.Text
			}
			if p.CancelOnDisconnect {
				dst.CancelOnDisconnect = true
			}
			return nil
		}
	}
	if n := proto.Size(req); int64(n) > limit {
		return tooLargeErr(n, limit)
	}
	dst, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "native: cannot receive into %T", m)
	}
	proto.Merge(dst, req)
	return nil
}

// startPromptViaGRPC starts the prompt through the in-process gRPC API, as
// before the native start (tests and benchmarks compare the two).
func (a *webAPI) startPromptViaGRPC(w http.ResponseWriter, r *http.Request, sessionID string) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ctx, err := runtime.AnnotateContext(ctx, a.gw, r, "/agentd.v1.AgentService/Prompt",
		runtime.WithHTTPPathPattern("/v1/sessions/{session_id}:prompt"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	inbound, _ := runtime.MarshalerForRequest(a.gw, r)
	var req agentdv1.PromptRequest
	if err := inbound.NewDecoder(r.Body).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		a.fail(w, r, status.Error(codes.InvalidArgument, err.Error()))
		return
	}
	req.SessionId = sessionID
	if req.GetCancelOnDisconnect() {
		a.fail(w, r, convert.InvalidArg("cancel_on_disconnect", "needs a caller that stays: stream the prompt (the start with stream=false answers at once)"))
		return
	}
	var ev *agentdv1.Event
	stream, err := agentdv1.NewAgentServiceClient(a.conn).Prompt(ctx, &req)
	if err == nil {
		ev, err = stream.Recv()
	}
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Internal, "the prompt ended before its first event")
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	cancel()
	writeStarted(w, sessionID, ev.GetPromptId(), ev.GetSeq())
}

// writeStarted answers a prompt start.
func writeStarted(w http.ResponseWriter, sessionID, promptID string, seq uint64) {
	w.Header()["Content-Type"] = []string{"application/json"}
	// A failed write means the client is gone: there is no one to tell.
	_ = json.NewEncoder(w).Encode(promptStarted{SessionID: sessionID, PromptID: promptID,
		AfterSeq: strconv.FormatUint(seq-1, 10)})
}
