package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/internal/server/console"
	"github.com/agentd/agentd/internal/server/convert"
	"github.com/agentd/agentd/internal/server/sse"
	"github.com/agentd/agentd/internal/server/token"
)

// The HTTP face for web frontends, around the gateway:
//
//   - CORS for the origins of http.cors.allowed_origins (preflights answered
//     here, for every REST route);
//   - stream tickets on GET /v1/sessions/{id}/events (?ticket=, see
//     package token and grant.go); a ticket on any other route is
//     UNAUTHENTICATED;
//   - a reconnecting EventSource's Last-Event-ID wins over the afterSeq of
//     the URL it reconnects to;
//   - POST /v1/sessions/{id}:prompt with Accept: application/json (or
//     ?stream=false) answers once the prompt is accepted;
//   - the two event streams, asked for as text/event-stream, are served
//     natively from the session engine, with the gateway's answers but
//     without its in-process gRPC call (sse_stream.go);
//   - so are POST /v1/sessions, GET and DELETE /v1/sessions/{id} and the
//     prompt start (rest_native.go);
//   - SSE responses get a ": ping" comment after http.sse_heartbeat_ms of
//     silence;
//   - the console, static files under /console/.

// corsAllowHeaders are the request headers the JSON and SSE routes need.
const corsAllowHeaders = "Authorization, Content-Type, Accept, Last-Event-ID, Cache-Control"

type webAPI struct {
	gw        *runtime.ServeMux
	conn      grpc.ClientConnInterface
	json      runtime.Marshaler
	tickets   *token.Tickets
	heartbeat time.Duration
	anyOrigin bool
	origins   map[string]bool
	next      http.Handler // the gateway, SSE headers set

	// The native SSE routes (sse_stream.go).
	sse   *sse.Marshaler // the gateway's SSE marshaler
	agent *agentService
	// The native routes' handlers, within the gRPC server's stream
	// interceptors.
	promptHandler, eventsHandler grpc.StreamHandler
	frames                       *frameCache
	// The native unary routes' handlers (rest_native.go), within its unary
	// interceptors.
	unary unaryHandlers
	// viaGateway (tests and benchmarks): serve r as before the native
	// routes, through the gateway (the prompt start: its in-process gRPC
	// call).
	viaGateway func(*http.Request) bool

	auth        *authenticator
	maxBody     int64         // limits.max_request_bytes
	bodyTimeout time.Duration // limits.body_timeout_ms
}

// webAPI wraps the gateway gw for browsers; events is its SSE marshaler.
func (s *Server) webAPI(gw *runtime.ServeMux, events *sse.Marshaler) http.Handler {
	hc := s.cfg.HTTP
	_, jsonOut := runtime.MarshalerForRequest(gw, &http.Request{Header: http.Header{}})
	a := &webAPI{gw: gw, conn: s.gwConn, json: jsonOut, tickets: s.tickets,
		heartbeat: hc.SSEHeartbeatMs.Duration(), origins: map[string]bool{},
		sse: events, agent: s.agent, frames: newFrameCache(), viaGateway: s.viaGateway,
		auth: s.auth, maxBody: s.cfg.Limits.MaxRequestBytes, bodyTimeout: s.cfg.Limits.BodyTimeoutMs.Duration(),
		promptHandler: s.streamInterceptors.bind(promptRoute.info, promptRoute.handler),
		eventsHandler: s.streamInterceptors.bind(eventsRoute.info, eventsRoute.handler),
		unary:         newUnaryHandlers(s.unaryInterceptors, s.agent)}
	if s.noSharedFrames {
		a.frames = nil
	}
	for _, o := range hc.CORS.AllowedOrigins {
		if o == "*" {
			a.anyOrigin = true
		}
		a.origins[o] = true
	}
	a.next = sse.Headers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sse.Wanted(r) {
			hw := newHeartbeatWriter(w, a.heartbeat)
			defer hw.finish()
			w = hw
		}
		gw.ServeHTTP(w, r)
	}))
	return a
}

// grantMetadata is the gateway's metadata annotator: it hands the gRPC call
// the grant of a checked stream ticket.
func grantMetadata(_ context.Context, r *http.Request) metadata.MD {
	if g, ok := r.Context().Value(grantCtxKey{}).(string); ok {
		return metadata.Pairs(token.GrantKey, g)
	}
	return nil
}

type grantCtxKey struct{}

func (a *webAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The routing runs in a call of its own, so that its frame is gone
	// while a stream is served: an idle SSE reader's goroutine then fits
	// in a smaller stack.
	rt := a.route(w, r)
	switch rt.kind {
	case routeDone:
	case routeStart:
		a.startPrompt(w, rt.r, rt.id)
	case routePrompt:
		a.servePrompt(w, rt.r, rt.inbound, rt.id)
	case routeEvents:
		a.serveEvents(w, rt.r, rt.id)
	case routeUnary:
		a.serveUnary(w, rt.r, rt.unary, rt.id, rt.inbound)
	default:
		a.next.ServeHTTP(w, rt.r)
	}
}

// routeKind is how ServeHTTP serves a request.
type routeKind int

const (
	routeGateway routeKind = iota // a.next: the gateway
	routeDone                     // answered already (CORS preflight, an error)
	routeStart                    // POST …:prompt?stream=false: start and answer
	routePrompt                   // POST …:prompt as a native event stream
	routeEvents                   // GET …/events as a native event stream
	routeUnary                    // a native unary route (rest_native.go)
)

type webRoute struct {
	kind    routeKind
	r       *http.Request
	id      string
	inbound runtime.Marshaler
	unary   *unaryRoute
}

// route checks r (CORS, stream tickets, grants) and decides how it is
// served.
//
//go:noinline
func (a *webAPI) route(w http.ResponseWriter, r *http.Request) webRoute {
	if a.cors(w, r) {
		return webRoute{kind: routeDone}
	}
	// Only this handler hands out grants.
	for k := range r.Header {
		if hasSuffixFold(k, token.GrantKey) {
			r.Header.Del(k)
		}
	}
	eventsID, isEvents := sessionRoute(r.URL.Path, "/events")
	isEvents = isEvents && r.Method == http.MethodGet
	q := queryOf(r)
	// The token first: nothing of an unauthenticated request's body is
	// read. (A ticket is checked below; the gRPC interceptors check again.)
	if a.auth.required() && !q.Has("ticket") {
		if err := a.bearer(r); err != nil {
			a.fail(w, r, err)
			return webRoute{kind: routeDone}
		}
	}
	var ok bool
	if r, ok = a.readBody(w, r); !ok {
		return webRoute{kind: routeDone}
	}
	if q.Has("ticket") {
		if !isEvents {
			a.fail(w, r, status.Error(codes.Unauthenticated, "a stream ticket is accepted only on GET /v1/sessions/{session_id}/events"))
			return webRoute{kind: routeDone}
		}
		tenant, err := a.tickets.Verify(ticketParam(q), eventsID)
		if err != nil {
			a.fail(w, r, status.Error(codes.Unauthenticated, err.Error()))
			return webRoute{kind: routeDone}
		}
		q.Del("ticket")
		r = withQuery(r.WithContext(context.WithValue(r.Context(), grantCtxKey{}, token.MakeGrant(tenant, eventsID))), q)
	}
	if isEvents {
		resumed, err := resumeFromLastEventID(r)
		if err != nil {
			a.fail(w, r, err)
			return webRoute{kind: routeDone}
		}
		r = resumed
	}
	if id, ok := sessionRoute(r.URL.Path, ":prompt"); ok && r.Method == http.MethodPost {
		start, err := promptStartWanted(r)
		if err != nil {
			a.fail(w, r, err)
			return webRoute{kind: routeDone}
		}
		if q := queryOf(r); q.Has("stream") {
			q.Del("stream")
			r = withQuery(r, q)
		}
		if start {
			return webRoute{kind: routeStart, r: r, id: id}
		}
		if inbound, ok := a.nativeSSE(r); ok {
			return webRoute{kind: routePrompt, r: r, id: id, inbound: inbound}
		}
	}
	if isEvents {
		if _, ok := a.nativeSSE(r); ok {
			return webRoute{kind: routeEvents, r: r, id: eventsID}
		}
	}
	if route, id := unaryRouteOf(r); route != nil {
		if inbound, ok := a.nativeJSON(r); ok {
			return webRoute{kind: routeUnary, r: r, id: id, inbound: inbound, unary: route}
		}
	}
	return webRoute{kind: routeGateway, r: r}
}

// hasSuffixFold is strings.HasSuffix under Unicode case folding, without
// the copy of strings.ToLower (a canonical header key has capitals: every
// request's headers would be copied).
func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// bearer checks r's Authorization header.
func (a *webAPI) bearer(r *http.Request) error {
	h := headerValue(r.Header, "Authorization")
	if h == "" {
		return errNoToken
	}
	_, err := a.auth.check(h)
	return err
}

// ticketParam is the one ticket of a query ("" when repeated: refused).
func ticketParam(q url.Values) string {
	if v := q["ticket"]; len(v) == 1 {
		return v[0]
	}
	return ""
}

func (a *webAPI) fail(w http.ResponseWriter, r *http.Request, err error) {
	runtime.HTTPError(r.Context(), a.gw, a.json, w, r, err)
}

// cors sets the CORS headers for an allowed origin and answers preflights.
// It reports whether the request has been answered.
func (a *webAPI) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := headerValue(r.Header, "Origin")
	preflight := r.Method == http.MethodOptions && origin != "" && headerValue(r.Header, "Access-Control-Request-Method") != ""
	h := w.Header()
	if len(a.origins) > 0 {
		h.Add("Vary", "Origin")
	}
	allowed := origin != "" && (a.anyOrigin || a.origins[strings.ToLower(origin)])
	if !allowed {
		if preflight {
			http.Error(w, "origin not allowed (http.cors.allowed_origins)", http.StatusForbidden)
		}
		return preflight
	}
	h.Set("Access-Control-Allow-Origin", origin)
	if !preflight {
		return false
	}
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// sessionRoute returns the {session_id} of /v1/sessions/{session_id}<suffix>.
func sessionRoute(path, suffix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/sessions/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, suffix)
	if !ok || id == "" || strings.ContainsAny(id, "/:") {
		return "", false
	}
	return id, true
}

// withQuery is r with the query q, the URL copied (and RequestURI, so that
// nothing downstream sees a removed parameter).
func withQuery(r *http.Request, q url.Values) *http.Request {
	r2 := r.WithContext(r.Context())
	u := *r.URL
	u.RawQuery = q.Encode()
	r2.URL = &u
	r2.RequestURI = u.RequestURI()
	return r2
}

// resumeFromLastEventID: an EventSource reconnects to the URL it was opened
// with, adding Last-Event-ID; the later seq wins over the URL's afterSeq.
// The header's seq is put in the URL (as afterSeq when it has neither
// spelling), so that it counts even where the gateway would drop it from
// the call's metadata (a value with non-ASCII spaces around the seq). A
// Last-Event-ID that is not a seq is INVALID_ARGUMENT, whatever the URL
// says.
func resumeFromLastEventID(r *http.Request) (*http.Request, error) {
	header := headerValue(r.Header, "Last-Event-Id")
	if header == "" {
		return r, nil
	}
	last, err := strconv.ParseUint(strings.TrimSpace(header), 10, 64)
	if err != nil {
		return nil, convert.InvalidArg("Last-Event-ID", "%q is not an event seq", header)
	}
	q := r.URL.Query()
	changed, inURL := false, false
	for _, name := range []string{"afterSeq", "after_seq"} {
		if !q.Has(name) {
			continue
		}
		inURL = true
		if v, err := strconv.ParseUint(q.Get(name), 10, 64); err == nil && last > v {
			q.Set(name, strconv.FormatUint(last, 10))
			changed = true
		}
	}
	if !inURL && last > 0 {
		q.Set("afterSeq", strconv.FormatUint(last, 10))
		changed = true
	}
	if !changed {
		return r, nil
	}
	return withQuery(r, q), nil
}

// queryOf is r's query, parsed; nil (nothing parsed, nothing allocated)
// when the URL has none. Only read a nil one (Has, Get) or Del from it.
func queryOf(r *http.Request) url.Values {
	if r.URL.RawQuery == "" {
		return nil
	}
	return r.URL.Query()
}

// promptStartWanted reports whether a prompt request asks to return once the
// prompt is accepted: ?stream=false, or Accept: application/json without
// text/event-stream.
func promptStartWanted(r *http.Request) (bool, error) {
	q := queryOf(r)
	if q.Has("stream") {
		switch strings.ToLower(q.Get("stream")) {
		case "false", "0":
			return true, nil
		case "true", "1":
			return false, nil
		default:
			return false, status.Errorf(codes.InvalidArgument, "stream: %q is not true or false", q.Get("stream"))
		}
	}
	if sse.Wanted(r) {
		return false, nil
	}
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "application/json") {
				return true, nil
			}
		}
	}
	return false, nil
}

// promptStarted answers a non-streaming prompt start.
type promptStarted struct {
	SessionID string `json:"sessionId"`
	PromptID  string `json:"promptId"`
	// AfterSeq is the seq before the prompt's first event: follow the prompt
	// with GET /v1/sessions/{id}/events?afterSeq=<afterSeq>.
	AfterSeq string `json:"afterSeq"`
}

// heartbeatWriter interleaves ": ping" comments into an SSE response after
// interval of silence, so that proxies keep an idle stream open. The
// handler's writes and the pings are serialised; a ping never splits a
// frame. The handler's headers live in a map of their own until it commits
// them, so that the pinger never races with it on the header map.
//
// A ping sends the response's headers (200, text/event-stream) if the
// handler has not yet: an error the handler reports after that (it only
// reports errors at once, before its first event, so this is rare) becomes
// an "event: error" frame, as errors in a started stream do.
type heartbeatWriter struct {
	rw       http.ResponseWriter
	h        http.Header // the handler's headers, until committed
	interval time.Duration

	mu        sync.Mutex
	committed bool          // the headers are sent
	pinged    bool          // a ping sent them
	open      bool          // the last write left a frame unfinished
	stopped   bool          // no more pings: an error status, a failed write, or done
	errBody   *bytes.Buffer // the handler's error body after a ping sent 200
	last      time.Time

	stop, done chan struct{}
}

func newHeartbeatWriter(w http.ResponseWriter, interval time.Duration) *heartbeatWriter {
	hw := &heartbeatWriter{rw: w, h: w.Header().Clone(), interval: interval, last: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go hw.loop()
	return hw
}

func (w *heartbeatWriter) Header() http.Header { return w.h }

func (w *heartbeatWriter) Unwrap() http.ResponseWriter { return w.rw }

func (w *heartbeatWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(code)
}

func (w *heartbeatWriter) writeHeaderLocked(code int) {
	if w.committed {
		if w.pinged && code != http.StatusOK && w.errBody == nil {
			w.errBody = &bytes.Buffer{}
			w.stopped = true
		}
		return
	}
	w.committed = true
	dst := w.rw.Header()
	clear(dst)
	for k, v := range w.h {
		dst[k] = v
	}
	if code != http.StatusOK {
		w.stopped = true
	}
	w.rw.WriteHeader(code)
}

func (w *heartbeatWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.committed {
		w.writeHeaderLocked(http.StatusOK)
	}
	if w.errBody != nil {
		return w.errBody.Write(p)
	}
	w.last = time.Now()
	if len(p) > 0 {
		w.open = !bytes.HasSuffix(p, []byte("\n\n"))
	}
	n, err := w.rw.Write(p)
	if err != nil {
		w.stopped = true
	}
	return n, err
}

// FlushError is what http.ResponseController (the gateway) calls.
func (w *heartbeatWriter) FlushError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.committed {
		w.writeHeaderLocked(http.StatusOK)
	}
	if w.errBody != nil {
		return nil
	}
	return http.NewResponseController(w.rw).Flush()
}

func (w *heartbeatWriter) Flush() { _ = w.FlushError() }

func (w *heartbeatWriter) loop() {
	defer close(w.done)
	t := time.NewTimer(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		next, ok := w.tick()
		if !ok {
			return
		}
		t.Reset(next)
	}
}

// tick pings if the stream has been idle for interval; it returns when to
// look again.
func (w *heartbeatWriter) tick() (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return 0, false
	}
	if idle := time.Since(w.last); idle < w.interval || w.open {
		return max(w.interval-idle, w.interval/4, time.Millisecond), true
	}
	if !w.committed {
		w.committed, w.pinged = true, true
		w.rw.Header()["Content-Type"] = []string{sse.ContentType}
		w.rw.WriteHeader(http.StatusOK)
	}
	if _, err := io.WriteString(w.rw, ": ping\n\n"); err != nil {
		w.stopped = true
		return 0, false
	}
	if err := http.NewResponseController(w.rw).Flush(); err != nil {
		w.stopped = true
		return 0, false
	}
	w.last = time.Now()
	return w.interval, true
}

// finish stops the pings (waiting for the pinger) once the handler is done.
func (w *heartbeatWriter) finish() {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	switch {
	case !w.committed:
		// Nothing written: net/http sends the handler's headers.
		dst := w.rw.Header()
		clear(dst)
		for k, v := range w.h {
			dst[k] = v
		}
	case w.errBody != nil && w.errBody.Len() > 0:
		var b bytes.Buffer
		b.WriteString("event: error\n")
		sse.WriteData(&b, bytes.TrimSpace(w.errBody.Bytes()))
		b.WriteString("\n\n")
		_, _ = w.rw.Write(b.Bytes()) // a failed write: the client is gone
		_ = http.NewResponseController(w.rw).Flush()
	}
}

// mountConsole serves the console at /console/.
func mountConsole(mux *http.ServeMux) {
	mux.Handle("GET /console/", http.StripPrefix("/console/", console.Handler()))
	mux.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
}
