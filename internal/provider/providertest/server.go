package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// Options configure a Handler.
type Options struct {
	// Answer is the default answer (nil: DefaultAnswer).
	Answer *Answer
	// Script decides the step of a request when the queue is empty (nil:
	// Step{}, the default answer).
	Script func(*Request) Step
	// Delay is waited before every response (time to first byte);
	// ChunkDelay between two frames of a stream.
	Delay, ChunkDelay time.Duration
	// APIKey, when set, must be on every request (Anthropic x-api-key, or
	// OpenAI "Authorization: Bearer …" or Azure api-key); a request without
	// it gets the kind's 401.
	APIKey string
	// Authorize, when set, decides instead of APIKey whether a request's
	// key (an access token: "Authorization: Bearer …") is valid, e.g.
	// TokenServer.Valid; a Vertex AI request it refuses gets Vertex's 401
	// UNAUTHENTICATED, an Azure one Azure's 401.
	Authorize func(key string) bool
	// Accounts maps API keys to the account (Anthropic) or organisation
	// (OpenAI) that reasoning state is bound to; a key it does not map
	// belongs to DefaultAccount. See reasoning.go.
	Accounts map[string]string
	// NoReasoningChecks accepts any reasoning state in a request's history
	// (signatures, encrypted content, the thinking-first rule).
	NoReasoningChecks bool
}

// Request is a recorded request and what became of it.
type Request struct {
	Index  int    // 0-based, in arrival order
	Kind   string // provider.KindAnthropic, KindOpenAIResponses or KindOpenAIChat
	Method string
	// RemoteAddr is the client's address: the same for two requests on one
	// (kept-alive) connection.
	RemoteAddr string
	Path       string
	Query      string
	Header     http.Header
	Body       []byte
	Model      string // the body's "model"
	// Step is the step played (set once chosen).
	Step Step
	// Done is set when the handler has finished with the request.
	Done bool
	// ClientGone is set when the request's context was done before the
	// handler finished: the client closed the connection (or the server
	// was closed) while the answer was being played.
	ClientGone bool
}

// JSON decodes the request body into v.
func (r *Request) JSON(v any) error { return json.Unmarshal(r.Body, v) }

// LastUserText returns the text of the request's latest user message
// (Anthropic messages, Responses input, Chat messages, Gemini contents),
// or "".
func (r *Request) LastUserText() string {
	var body struct {
		Messages []json.RawMessage `json:"messages"`
		Input    json.RawMessage   `json:"input"`
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text             string          `json:"text"`
				FunctionResponse json.RawMessage `json:"functionResponse"`
			} `json:"parts"`
		} `json:"contents"`
	}
	if json.Unmarshal(r.Body, &body) != nil {
		return ""
	}
	if r.Kind == provider.KindGemini {
		for i := len(body.Contents) - 1; i >= 0; i-- {
			c := body.Contents[i]
			var b strings.Builder
			for _, p := range c.Parts {
				b.WriteString(p.Text)
			}
			if c.Role == "user" && b.Len() > 0 {
				return b.String()
			}
		}
		return ""
	}
	items := body.Messages
	if r.Kind == provider.KindOpenAIResponses {
		var s string
		if json.Unmarshal(body.Input, &s) == nil {
			return s
		}
		_ = json.Unmarshal(body.Input, &items)
	}
	for i := len(items) - 1; i >= 0; i-- {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(items[i], &m) != nil || m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			return s
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(m.Content, &parts)
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" || p.Type == "input_text" {
				b.WriteString(p.Text)
			}
		}
		if b.Len() > 0 {
			return b.String()
		}
	}
	return ""
}

// Handler is a fake provider: an http.Handler answering
//
//	POST …/messages          Anthropic Messages (streaming)
//	POST …/responses         OpenAI Responses (streaming)
//	POST …/chat/completions  OpenAI Chat Completions (streaming)
//
// whatever the path prefix (so "/v1/messages" and "/openai/v1/responses"
// both work). Each request plays one Step: the next one queued with
// Enqueue, else Options.Script's, else the default answer. It is safe for
// concurrent use.
type Handler struct {
	opts Options

	mu      sync.Mutex
	queue   []Step
	reqs    []*Request
	changed chan struct{} // closed and replaced whenever a request finishes

	closed    chan struct{}
	closeOnce sync.Once
}

// NewHandler returns a fake provider handler.
func NewHandler(opts Options) *Handler {
	return &Handler{opts: opts, changed: make(chan struct{}), closed: make(chan struct{})}
}

// Enqueue appends steps to the fault script: the n-th request after this
// call plays the n-th step (requests past the end: Options.Script, else the
// default answer).
func (h *Handler) Enqueue(steps ...Step) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queue = append(h.queue, steps...)
}

// Requests returns a snapshot of every request received so far.
func (h *Handler) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snapshotLocked()
}

func (h *Handler) snapshotLocked() []Request {
	out := make([]Request, len(h.reqs))
	for i, r := range h.reqs {
		out[i] = *r
		out[i].Header = r.Header.Clone()
	}
	return out
}

// WaitRequests waits until at least n requests are done (their handler has
// finished), and returns the snapshot then, or ctx's error.
func (h *Handler) WaitRequests(ctx context.Context, n int) ([]Request, error) {
	for {
		h.mu.Lock()
		done := 0
		for _, r := range h.reqs {
			if r.Done {
				done++
			}
		}
		if done >= n {
			defer h.mu.Unlock()
			return h.snapshotLocked(), nil
		}
		ch := h.changed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("providertest: waiting for %d done requests (%d so far): %w", n, done, ctx.Err())
		}
	}
}

// Close ends every hang, hold and delay in progress (their requests end as
// if cut). It does not close any listener.
func (h *Handler) Close() {
	h.closeOnce.Do(func() { close(h.closed) })
}

// maxBody bounds a recorded request body.
const maxBody = 64 << 20

// kindOf is the provider kind a path asks for, or "".
func kindOf(path string) string {
	switch {
	case strings.HasSuffix(path, "/messages"):
		return provider.KindAnthropic
	case strings.HasSuffix(path, "/responses"):
		return provider.KindOpenAIResponses
	case strings.HasSuffix(path, "/chat/completions"):
		return provider.KindOpenAIChat
	case strings.HasSuffix(path, ":streamGenerateContent"):
		return provider.KindGemini
	}
	return ""
}

// ServeHTTP plays one request's step.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := kindOf(r.URL.Path)
	if kind == "" || r.Method != http.MethodPost {
		http.Error(w, "providertest: POST …/messages, …/responses, …/chat/completions or …/models/{model}:streamGenerateContent", http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var fields struct {
		Model              string   `json:"model"`
		PreviousResponseID string   `json:"previous_response_id"`
		Store              *bool    `json:"store"`
		Include            []string `json:"include"`
		StreamOptions      struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &fields)
	if kind == provider.KindGemini {
		fields.Model = geminiModel(r.URL.Path)
	}
	deployment, azure := azureDeployment(r.URL.Path)
	if azure {
		fields.Model = deployment // Azure ignores the body's model
	}
	azure = azure || azureResponses(r.URL.Path)

	h.mu.Lock()
	req := &Request{
		Index: len(h.reqs), Kind: kind, Method: r.Method, RemoteAddr: r.RemoteAddr, Path: r.URL.Path, Query: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body, Model: fields.Model,
	}
	h.reqs = append(h.reqs, req)
	h.mu.Unlock()

	key := requestKey(kind, r.Header)
	badKey := h.opts.APIKey != "" && key != h.opts.APIKey
	if h.opts.Authorize != nil {
		badKey = !h.opts.Authorize(key)
	}
	var step Step
	switch {
	case azure && r.URL.Query().Get("api-version") == "":
		step = RawError(http.StatusNotFound, AzureNoAPIVersion)
	case azure && badKey && r.Header.Get("Authorization") != "":
		step = RawError(http.StatusUnauthorized, AzureBadToken, "Content-Type", "application/json",
			"WWW-Authenticate", `Bearer authorization_uri="https://login.microsoftonline.com/common/oauth2/authorize", error="invalid_token"`)
	case azure && badKey:
		step = RawError(http.StatusUnauthorized, AzureBadKey)
	case badKey && kind == provider.KindGemini && strings.Contains(r.URL.Path, "/publishers/"):
		step = RawError(http.StatusUnauthorized, VertexUnauthenticated, "Content-Type", "application/json; charset=UTF-8",
			"WWW-Authenticate", `Bearer realm="https://accounts.google.com/"`)
	case badKey && kind == provider.KindGemini:
		step = RawError(http.StatusBadRequest, GeminiInvalidAPIKey) // Gemini's answer to a bad key is a 400
	case badKey:
		step = HTTPError(http.StatusUnauthorized)
	default:
		var refused bool
		if step, refused = h.checkReasoning(kind, key, fields.Model, body); !refused {
			step = h.nextStep(req)
		}
	}
	h.mu.Lock()
	req.Step = step
	h.mu.Unlock()

	p := player{h: h, w: w, r: r, step: &step, kind: kind, key: key, reqID: fmt.Sprintf("req_test%04d", req.Index)}
	p.si = streamInfo{
		kind: kind, model: fields.Model, index: req.Index,
		previousResponseID: fields.PreviousResponseID, store: fields.Store == nil || *fields.Store,
		includeUsage: fields.StreamOptions.IncludeUsage,
		account:      h.account(key),
		encrypted:    slices.Contains(fields.Include, "reasoning.encrypted_content"),
	}
	p.play()

	h.mu.Lock()
	req.Done = true
	req.ClientGone = r.Context().Err() != nil
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

func (h *Handler) nextStep(req *Request) Step {
	h.mu.Lock()
	if len(h.queue) > 0 {
		s := h.queue[0]
		h.queue = h.queue[1:]
		h.mu.Unlock()
		return s
	}
	h.mu.Unlock()
	if h.opts.Script != nil {
		return h.opts.Script(req)
	}
	return Step{}
}

// requestKey is the API key a request carries for its kind.
func requestKey(kind string, h http.Header) string {
	if kind == provider.KindAnthropic {
		return h.Get("x-api-key")
	}
	if kind == provider.KindGemini && h.Get("x-goog-api-key") != "" {
		return h.Get("x-goog-api-key")
	}
	if v, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer "); ok {
		return v
	}
	return h.Get("api-key")
}

// player plays one step.
type player struct {
	h     *Handler
	w     http.ResponseWriter
	r     *http.Request
	step  *Step
	kind  string
	key   string
	reqID string
	si    streamInfo
	sent  int // frames written
}

// wait waits d (or forever when d < 0) or until the client is gone or the
// handler closed; it reports whether playing goes on.
func (p *player) wait(d time.Duration, until <-chan struct{}) bool {
	var t <-chan time.Time
	if d >= 0 {
		if d == 0 && until == nil {
			return p.live()
		}
		if d > 0 {
			timer := time.NewTimer(d)
			defer timer.Stop()
			t = timer.C
		}
	}
	select {
	case <-t:
	case <-until:
	case <-p.r.Context().Done():
	case <-p.h.closed:
	}
	return p.live()
}

func (p *player) live() bool {
	select {
	case <-p.h.closed:
		return false
	default:
		return p.r.Context().Err() == nil
	}
}

func (p *player) setHeaders(contentType string) {
	h := p.w.Header()
	h.Set("Content-Type", contentType)
	switch p.kind {
	case provider.KindAnthropic:
		h.Set("request-id", p.reqID)
	case provider.KindGemini:
		h.Set("Server", "scaffolding on HTTPServer2")
		h.Set("Vary", "Origin")
		h.Set("X-Gemini-Service-Tier", "standard")
	default:
		h.Set("x-request-id", p.reqID)
	}
	for k, vs := range p.step.Headers {
		h.Del(k)
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

func (p *player) play() {
	s := p.step
	if !p.wait(p.h.opts.Delay+s.Delay, nil) {
		return
	}
	switch s.Kind {
	case StepHTTPError:
		ct := s.ContentType
		if ct == "" {
			ct = "application/json"
			if p.kind == provider.KindGemini {
				ct = "application/json; charset=UTF-8"
			}
		}
		p.setHeaders(ct)
		p.w.Header().Set("Content-Length", fmt.Sprint(len(p.body())))
		p.w.WriteHeader(s.Status)
		_, _ = io.WriteString(p.w, p.body())
		return
	case StepReset:
		if s.BeforeHeaders {
			p.reset()
			return
		}
	case StepHang:
		if s.BeforeHeaders {
			p.wait(-1, nil)
			return
		}
	}

	a := s.Answer
	if a == nil {
		a = p.h.opts.Answer
	}
	if a == nil {
		a = DefaultAnswer()
	}
	pl := newPlan(p.si, a)

	if p.kind == provider.KindGemini {
		p.setHeaders("text/event-stream")
	} else {
		p.setHeaders("text/event-stream; charset=utf-8")
	}
	p.w.Header().Set("Cache-Control", "no-cache")
	p.w.WriteHeader(http.StatusOK)
	http.NewResponseController(p.w).Flush()

	fault := s.Kind != StepOK && s.Kind != ""
	if !(fault && s.SkipPreamble) && !p.write(pl.preamble) {
		return
	}
	n := len(pl.body)
	if fault {
		n = min(max(s.After, 0), n)
	}
	for i := 0; i < n; i++ {
		if s.Hold != nil && i == s.HoldAfter && !p.wait(-1, s.Hold) {
			return
		}
		if !p.write(pl.body[i : i+1]) {
			return
		}
	}
	if s.Hold != nil && s.HoldAfter >= n && !p.wait(-1, s.Hold) {
		return
	}
	switch s.Kind {
	case StepOK, "":
		p.write(pl.terminal)
	case StepErrorEvent:
		p.write(pl.errFrames(s, p.sent))
	case StepCut:
	case StepReset:
		p.reset()
	case StepHang:
		p.wait(-1, nil)
	}
}

// body is a StepHTTPError's body.
func (p *player) body() string {
	if p.step.Body != "" {
		return p.step.Body
	}
	if p.kind == provider.KindGemini {
		return geminiBody(p.step.Status, p.si.model)
	}
	return Body(p.kind, p.step.Status, p.key)
}

// write writes frames, paced, flushing each; it reports whether playing
// goes on.
func (p *player) write(frames []string) bool {
	rc := http.NewResponseController(p.w)
	for _, f := range frames {
		if p.sent > 0 {
			d := p.h.opts.ChunkDelay
			if p.step.ChunkDelay > 0 {
				d = p.step.ChunkDelay
			}
			if !p.wait(d, nil) {
				return false
			}
		}
		if _, err := io.WriteString(p.w, f); err != nil {
			return false
		}
		if err := rc.Flush(); err != nil {
			return false
		}
		p.sent++
	}
	return p.live()
}

// reset resets the connection: hijack, SO_LINGER 0 (an RST instead of a
// FIN), close.
func (p *player) reset() {
	conn, _, err := http.NewResponseController(p.w).Hijack()
	if err != nil {
		return
	}
	c := conn
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = nc.NetConn()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// Server is a Handler listening on a loopback port.
type Server struct {
	*Handler
	// URL is the server's root, e.g. "http://127.0.0.1:41234" (no /v1).
	URL string
	srv *httptest.Server
}

// NewServer starts a fake provider on a loopback port (plain HTTP/1.1).
func NewServer(opts Options) *Server {
	h := NewHandler(opts)
	srv := httptest.NewServer(h)
	return &Server{Handler: h, URL: srv.URL, srv: srv}
}

// NewTLSServer starts a fake provider speaking TLS with a self-signed
// certificate: a client not given Client's trust gets a TLS error.
func NewTLSServer(opts Options) *Server {
	h := NewHandler(opts)
	srv := httptest.NewTLSServer(h)
	return &Server{Handler: h, URL: srv.URL, srv: srv}
}

// Client returns an HTTP client that trusts the server (TLS included).
func (s *Server) Client() *http.Client { return s.srv.Client() }

// CloseClientConnections closes every open connection to the server.
func (s *Server) CloseClientConnections() { s.srv.CloseClientConnections() }

// Close ends every request in progress (see Handler.Close) and stops the
// server.
func (s *Server) Close() {
	s.Handler.Close()
	s.srv.Close()
}

// Frames returns the SSE frames the server streams for an answer to a
// request of a kind for model (preamble, body and terminal frames joined),
// for golden tests and for tools that want the bytes. Reasoning state is
// DefaultAccount's.
func Frames(kind, model string, a *Answer) string {
	pl := newPlan(streamInfo{kind: kind, model: model, store: true, account: DefaultAccount}, a)
	var b bytes.Buffer
	for _, f := range [][]string{pl.preamble, pl.body, pl.terminal} {
		for _, s := range f {
			b.WriteString(s)
		}
	}
	return b.String()
}
