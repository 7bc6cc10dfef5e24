// Package mock is the mock LLM provider behind `agentd mock-provider` and
// the load tool (`agentd bench`): the fake-provider engine the tests use
// ([providertest]) — the streaming wire formats of Anthropic Messages,
// OpenAI Responses and OpenAI Chat Completions (Azure OpenAI's paths
// included) and Gemini streamGenerateContent (Google AI's and Vertex AI's
// paths), byte for byte — with its
// steps chosen per request from a fault script, so that any client can be
// pointed at it for chaos testing.
//
// # Routes
//
//	POST …/messages, …/responses, …/chat/completions   the provider (any prefix)
//	POST …/models/{model}:streamGenerateContent         Gemini, and Vertex AI's
//	                                                    …/publishers/google/models/… paths
//	POST /mock/token                                    OAuth 2.0 tokens (TokenPath) for
//	                                                    vertex and azure-openai with entra_id
//	GET  /mock/stats                                    counters, as JSON
//	GET  /healthz                                       "ok"
//
// # Scripts
//
// A request's script is, in order of precedence: the [[faults: …]]
// directive in the text of the request's latest user message, the
// X-Mock-Faults header, or Options.Faults. The grammar is the simulated
// provider's (package sim): "529,429:retry-after=2,ok". The n-th request
// carrying the same latest user message text plays the n-th step (a retry
// resends the same conversation, so "[[faults: 529,ok]]" fails the first
// call of a prompt and answers its retry, on whatever provider it goes
// to); requests past the end of the script answer normally. Give each
// prompt a text of its own (a nonce) to replay a script; counters are
// forgotten after Options.KeyTTL.
//
// Steps on the wire: a status answers that HTTP status with the kind's
// canonical error body (see [providertest.Body]); overloaded-stream sends
// the kind's in-stream error event after the stream started; midstream
// resets the connection after=N text deltas in (default half); cut ends the
// body without the terminal event; reset resets the connection before the
// headers; timeout and hang stop answering until the client gives up;
// overflow, usage and stale answer the provider's own context-overflow,
// quota (429) and stale-replay (400) bodies; refusal streams a refusal
// stop. Options delay=, retry-after=, retry-after-ms= and reset= work as in
// sim. The sim-only step abort has no wire form and is refused (400), as
// is a malformed script.
//
// # Answers and pacing
//
// The answer is N words of lorem ipsum with [[tokens: N]], X-Mock-Tokens or
// Options.Tokens (in that order of precedence), else an echo of the prompt
// ("echo: …" without its directives), one text delta per word. The time
// to the response is [[pace: first=MS]], X-Mock-Delay-Ms or Options.Delay
// (never less than Options.Delay), the time between two SSE frames
// [[pace: chunk=MS]], X-Mock-Chunk-Delay-Ms or Options.ChunkDelay.
//
// # Stamps
//
// With Options.Stamp or the header X-Mock-Stamp: 1, every text delta reads
// "s<W>a<A> ", W the Unix time in nanoseconds at which the mock wrote the
// frame and A the one at which the request arrived (19 digits each): a
// client, however many hops away on the same host, computes each chunk's
// transit time and the request's inbound time (see [ParseStamp]).
package mock

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/provider/sim"
)

// Request headers that drive a request.
const (
	HeaderFaults     = "X-Mock-Faults"
	HeaderTokens     = "X-Mock-Tokens"
	HeaderDelay      = "X-Mock-Delay-Ms"
	HeaderChunkDelay = "X-Mock-Chunk-Delay-Ms"
	HeaderStamp      = "X-Mock-Stamp"
)

// Options configure a Mock.
type Options struct {
	// Delay is waited before every response, ChunkDelay between two frames
	// of a stream.
	Delay, ChunkDelay time.Duration
	// Tokens is the default answer length in words (0: echo the prompt).
	Tokens int
	// Faults is the default fault script (sim grammar, without the
	// brackets: "529,ok"), for conversations whose requests carry none.
	Faults string
	// APIKey, when set, must be on every request (else the kind's 401).
	APIKey string
	// Stamp stamps every text delta (see the package doc).
	Stamp bool
	// Log, when set, gets one line per request.
	Log io.Writer
	// KeyTTL is how long a conversation's request counter is kept after
	// its last request (default 10 minutes).
	KeyTTL time.Duration
	// Rotate is how many requests one engine records before the Mock starts
	// a fresh one (the engine keeps every request it saw; default 4096).
	Rotate int
}

// Stats are a Mock's counters.
type Stats struct {
	Requests    int64            `json:"requests"`
	Streams     int64            `json:"streams"` // requests answered with a stream (ok or faulting mid-stream)
	Errors      int64            `json:"errors"`  // requests answered with an HTTP error, a reset or a hang
	Steps       map[string]int64 `json:"steps"`   // requests by step played ("ok", "529", "reset", …)
	Connections int64            `json:"connections"`
	Active      int64            `json:"active"` // requests in progress
	Tokens      int64            `json:"tokens"` // access tokens issued at TokenPath
}

// Mock is the mock provider: an http.Handler.
type Mock struct {
	opts     Options
	defaults sim.Script

	engine atomic.Pointer[engine]
	rotMu  sync.Mutex

	keysMu sync.Mutex
	keys   map[string]*keyState
	swept  time.Time

	requests, streams, errs, conns, active, tokens atomic.Int64
	stepsMu                                        sync.Mutex
	steps                                          map[string]int64
}

type engine struct {
	h    *providertest.Handler
	left atomic.Int64
}

type keyState struct {
	n    int
	last time.Time
}

// New returns a Mock; it fails on a bad Options.Faults.
func New(opts Options) (*Mock, error) {
	if opts.KeyTTL <= 0 {
		opts.KeyTTL = 10 * time.Minute
	}
	if opts.Rotate <= 0 {
		opts.Rotate = 4096
	}
	if opts.Tokens < 0 || opts.Tokens > sim.MaxTokens {
		return nil, fmt.Errorf("mock: tokens: want 0 to %d, got %d", sim.MaxTokens, opts.Tokens)
	}
	m := &Mock{opts: opts, keys: map[string]*keyState{}, steps: map[string]int64{}, swept: time.Now()}
	if opts.Faults != "" {
		s, err := parseFaults(opts.Faults)
		if err != nil {
			return nil, fmt.Errorf("mock: faults: %w", err)
		}
		m.defaults = s
	}
	m.newEngine()
	return m, nil
}

func (m *Mock) newEngine() *engine {
	opts := providertest.Options{Delay: m.opts.Delay, ChunkDelay: m.opts.ChunkDelay, APIKey: m.opts.APIKey, Script: m.script}
	if m.opts.APIKey != "" {
		// The key, or an access token of the mock's token endpoint.
		opts.Authorize = func(key string) bool { return key == m.opts.APIKey || m.issued(key) }
	}
	e := &engine{h: providertest.NewHandler(opts)}
	e.left.Store(int64(m.opts.Rotate))
	m.engine.Store(e)
	return e
}

// handler returns the engine for one more request, starting a fresh one when
// the current has recorded Options.Rotate requests.
func (m *Mock) handler() *providertest.Handler {
	e := m.engine.Load()
	if e.left.Add(-1) >= 0 {
		return e.h
	}
	m.rotMu.Lock()
	defer m.rotMu.Unlock()
	if cur := m.engine.Load(); cur != e {
		if cur.left.Add(-1) >= 0 {
			return cur.h
		}
	}
	// The old engine's requests in progress finish on their own (a hang
	// ends when its client goes away).
	return m.newEngine().h
}

// Close ends the hangs and delays in progress on the current engine.
func (m *Mock) Close() { m.engine.Load().h.Close() }

// ConnState counts connections; set it as the http.Server's ConnState.
func (m *Mock) ConnState(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		m.conns.Add(1)
	}
}

// Stats returns the counters.
func (m *Mock) Stats() Stats {
	st := Stats{Requests: m.requests.Load(), Streams: m.streams.Load(), Errors: m.errs.Load(),
		Connections: m.conns.Load(), Active: m.active.Load(), Tokens: m.tokens.Load(), Steps: map[string]int64{}}
	m.stepsMu.Lock()
	for k, v := range m.steps {
		st.Steps[k] = v
	}
	m.stepsMu.Unlock()
	return st
}

// ServeHTTP serves the provider routes, /mock/stats and /healthz.
func (m *Mock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/mock/stats":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m.Stats())
		return
	case r.Method == http.MethodGet && r.URL.Path == "/healthz":
		_, _ = io.WriteString(w, "ok\n")
		return
	case r.URL.Path == TokenPath:
		m.serveToken(w, r)
		return
	}
	m.requests.Add(1)
	m.active.Add(1)
	defer m.active.Add(-1)
	if m.stamping(r.Header) {
		sw := &stampWriter{ResponseWriter: w, arrival: time.Now().UnixNano()}
		w = sw
	}
	started := time.Now()
	m.handler().ServeHTTP(w, r)
	if m.opts.Log != nil {
		fmt.Fprintf(m.opts.Log, "%s %s %s %s\n", started.Format("15:04:05.000"), r.Method, r.URL.Path, time.Since(started).Round(time.Microsecond))
	}
}

func (m *Mock) stamping(h http.Header) bool {
	if v := h.Get(HeaderStamp); v != "" {
		b, err := strconv.ParseBool(v)
		return err == nil && b
	}
	return m.opts.Stamp
}

func (m *Mock) count(step string, stream bool) {
	if stream {
		m.streams.Add(1)
	} else {
		m.errs.Add(1)
	}
	m.stepsMu.Lock()
	m.steps[step]++
	m.stepsMu.Unlock()
}

// call returns the 0-based index of this request among those carrying the
// same conversation key.
func (m *Mock) call(key string) int {
	now := time.Now()
	m.keysMu.Lock()
	defer m.keysMu.Unlock()
	if len(m.keys) > 1024 && now.Sub(m.swept) > m.opts.KeyTTL/10 {
		for k, st := range m.keys {
			if now.Sub(st.last) > m.opts.KeyTTL {
				delete(m.keys, k)
			}
		}
		m.swept = now
	}
	st := m.keys[key]
	if st == nil {
		st = &keyState{}
		m.keys[key] = st
	}
	n := st.n
	st.n++
	st.last = now
	return n
}

// parseFaults parses a script written without its brackets ("529,ok").
func parseFaults(s string) (sim.Script, error) {
	return sim.ParseScript("[[faults: " + s + "]]")
}

var directiveRe = regexp.MustCompile(`(?is)[ \t]*\[\[\s*(faults|tokens|tools)\b(.*?)\]\]`)

var paceRe = regexp.MustCompile(`(?is)\[\[\s*pace\s*:(.*?)\]\]`)

// pace reads a [[pace: first=MS, chunk=MS]] directive.
func pace(text string) (first, chunk time.Duration, hasFirst, hasChunk bool, err error) {
	m := paceRe.FindStringSubmatch(text)
	if m == nil {
		return 0, 0, false, false, nil
	}
	for _, kv := range strings.Split(m[1], ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		n, nerr := strconv.Atoi(v)
		if !ok || nerr != nil || n < 0 || n > sim.MaxDelayMS {
			return 0, 0, false, false, fmt.Errorf("pace: want first=MS and/or chunk=MS (0 to %d), got %q", sim.MaxDelayMS, strings.TrimSpace(kv))
		}
		switch k {
		case "first":
			first, hasFirst = time.Duration(n)*time.Millisecond, true
		case "chunk":
			chunk, hasChunk = time.Duration(n)*time.Millisecond, true
		default:
			return 0, 0, false, false, fmt.Errorf("pace: unknown key %q (first, chunk)", k)
		}
	}
	return first, chunk, hasFirst, hasChunk, nil
}

func headerMillis(h http.Header, name string) (time.Duration, bool, error) {
	v := h.Get(name)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > sim.MaxDelayMS {
		return 0, false, fmt.Errorf("%s: want 0 to %d, got %q", name, sim.MaxDelayMS, v)
	}
	return time.Duration(n) * time.Millisecond, true, nil
}

// script is the engine's Options.Script: the step of one request. A
// directive in the prompt beats the request's header, which beats Options.
func (m *Mock) script(req *providertest.Request) providertest.Step {
	text := req.LastUserText()
	bad := func(msg string) providertest.Step {
		m.count("400", false)
		return invalidRequest(req.Kind, "mock: "+msg)
	}
	script, err := sim.ParseScript(text)
	if err != nil {
		return bad(err.Error())
	}
	if len(script.Steps) == 0 {
		if h := req.Header.Get(HeaderFaults); h != "" {
			hs, err := parseFaults(h)
			if err != nil {
				return bad(HeaderFaults + ": " + err.Error())
			}
			script.Steps = hs.Steps
		} else {
			script.Steps = m.defaults.Steps
		}
	}
	tokens := m.opts.Tokens
	if v := req.Header.Get(HeaderTokens); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > sim.MaxTokens {
			return bad(fmt.Sprintf("%s: want 0 to %d, got %q", HeaderTokens, sim.MaxTokens, v))
		}
		tokens = n
	}
	if script.Tokens > 0 {
		tokens = script.Tokens
	}
	// Pacing: Options (the engine's defaults), then the headers, then
	// [[pace: …]]. Step.Delay adds to Options.Delay; Step.ChunkDelay > 0
	// replaces Options.ChunkDelay (a chunk delay of 0 over a default one
	// is 1ns: as good as none).
	first, chunk := m.opts.Delay, m.opts.ChunkDelay
	if d, ok, err := headerMillis(req.Header, HeaderDelay); err != nil {
		return bad(err.Error())
	} else if ok {
		first = d
	}
	if d, ok, err := headerMillis(req.Header, HeaderChunkDelay); err != nil {
		return bad(err.Error())
	} else if ok {
		chunk = d
	}
	pf, pc, hasFirst, hasChunk, err := pace(text)
	if err != nil {
		return bad(err.Error())
	}
	if hasFirst {
		first = pf
	}
	if hasChunk {
		chunk = pc
	}

	var pieces []string
	switch {
	case m.stamping(req.Header):
		pieces = make([]string, max(tokens, 1))
		for i := range pieces {
			pieces[i] = stampPlaceholder
		}
	case tokens > 0:
		pieces = lorem(tokens)
	default:
		echo := strings.TrimSpace(paceRe.ReplaceAllString(directiveRe.ReplaceAllString(text, ""), ""))
		if echo == "" {
			echo = "(empty prompt)"
		}
		pieces = providertest.Words("echo: " + echo)
	}
	answer := &providertest.Answer{Text: pieces}

	st := script.Step(m.call(text))
	step, label, stream := wireStep(req.Kind, st, answer)
	// The engine waits Options.Delay + Step.Delay.
	step.Delay += first - m.opts.Delay
	if step.Delay < 0 {
		step.Delay = 0
	}
	if chunk != m.opts.ChunkDelay {
		step.ChunkDelay = max(chunk, time.Nanosecond)
	}
	m.count(label, stream)
	return step
}

// bodyFramesBefore is how many body frames of a kind's plan come before the
// first text delta (Anthropic content_block_start and ping; Responses
// output_item.added and content_part.added; Chat none).
func bodyFramesBefore(kind string) int {
	if kind == provider.KindOpenAIChat || kind == provider.KindGemini {
		return 0
	}
	return 2
}

// wireStep maps a sim step onto the engine's; it returns the step, a label
// for the counters and whether it streams.
func wireStep(kind string, st sim.Step, answer *providertest.Answer) (providertest.Step, string, bool) {
	headers := http.Header{}
	if st.RetryAfter != "" {
		headers.Set("retry-after", st.RetryAfter)
	}
	if st.RetryAfterMS != "" {
		headers.Set("retry-after-ms", st.RetryAfterMS)
	}
	if st.Reset != "" {
		setReset(headers, kind, st.Reset)
	}
	if len(headers) == 0 {
		headers = nil
	}
	words := len(answer.Text)
	after := func(def int) int {
		n := def
		if st.After > 0 {
			n = min(st.After, words)
		}
		return bodyFramesBefore(kind) + n
	}
	var s providertest.Step
	label := string(st.Kind)
	stream := false
	switch st.Kind {
	case sim.StepOK, "":
		s = providertest.Step{Kind: providertest.StepOK}
		label, stream = "ok", true
	case sim.StepHTTP:
		s = providertest.Step{Kind: providertest.StepHTTPError, Status: st.Status}
		label = strconv.Itoa(st.Status)
	case sim.StepOverloadedStream:
		s = providertest.Step{Kind: providertest.StepErrorEvent, After: 0}
		stream = true
	case sim.StepMidstream:
		s = providertest.Step{Kind: providertest.StepReset, After: after(max(words/2, 1))}
		stream = true
	case sim.StepCut:
		s = providertest.Step{Kind: providertest.StepCut, After: providertest.AllFrames}
		if st.After > 0 {
			s.After = after(0)
		}
		stream = true
	case sim.StepReset:
		s = providertest.Step{Kind: providertest.StepReset, BeforeHeaders: true}
	case sim.StepTimeout:
		s = providertest.Step{Kind: providertest.StepHang, BeforeHeaders: true}
	case sim.StepHang:
		if st.After > 0 {
			s = providertest.Step{Kind: providertest.StepHang, After: after(0)}
			stream = true
		} else {
			s = providertest.Step{Kind: providertest.StepHang, BeforeHeaders: true}
		}
	case sim.StepOverflow:
		body := providertest.AnthropicPromptTooLong
		switch kind {
		case provider.KindOpenAIChat:
			body = providertest.OpenAIContextLength
		case provider.KindOpenAIResponses:
			body = providertest.OpenAIInputTooLong
		case provider.KindGemini:
			body = providertest.GeminiTokenCount
		}
		s = providertest.Step{Kind: providertest.StepHTTPError, Status: 400, Body: body}
	case sim.StepUsage:
		body := providertest.OpenAIInsufficientQuota
		switch kind {
		case provider.KindAnthropic:
			body = providertest.AnthropicSpendLimit
		case provider.KindGemini:
			body = providertest.GeminiDailyQuota // a per-day QuotaFailure
		}
		s = providertest.Step{Kind: providertest.StepHTTPError, Status: 429, Body: body}
	case sim.StepStale:
		s = providertest.Step{Kind: providertest.StepHTTPError, Status: 400,
			Body: providertest.OpenAIPreviousResponseNotFound("resp_mock")}
	case sim.StepRefusal:
		answer = &providertest.Answer{Stop: providertest.StopRefusal,
			Refusal: "Classifier declined this turn.", RefusalCategory: "cyber"}
		s = providertest.Step{Kind: providertest.StepOK}
		stream = true
	default: // sim.StepAbort: an in-process outcome with no wire form
		s = invalidRequest(kind, fmt.Sprintf("mock: step %q has no wire form (simulated provider only)", st.Kind))
		label = "400"
	}
	s.Answer = answer
	s.Delay = st.Delay
	if headers != nil {
		s.Headers = headers
	}
	return s, label, stream
}

// setReset sets the kind's reset header for reset=V (an RFC 3339 time or a
// Go duration from now), as sim does: Anthropic's
// anthropic-ratelimit-requests-reset (RFC 3339), OpenAI's
// x-ratelimit-reset-requests (a Go duration).
func setReset(h http.Header, kind, v string) {
	now := time.Now()
	var at time.Time
	if d, err := time.ParseDuration(v); err == nil {
		at = now.Add(d)
	} else if t, err := time.Parse(time.RFC3339, v); err == nil {
		at = t
	} else {
		return
	}
	if kind == provider.KindAnthropic {
		h.Set("anthropic-ratelimit-requests-reset", at.UTC().Format(time.RFC3339))
		return
	}
	h.Set("x-ratelimit-reset-requests", max(at.Sub(now), 0).Round(time.Millisecond).String())
}

// invalidRequest is a 400 in the kind's error envelope.
func invalidRequest(kind, msg string) providertest.Step {
	m, _ := json.Marshal(msg)
	body := `{"error":{"message":` + string(m) + `,"type":"invalid_request_error","param":null,"code":null}}`
	switch kind {
	case provider.KindAnthropic:
		body = `{"type":"error","error":{"type":"invalid_request_error","message":` + string(m) + `}}`
	case provider.KindGemini:
		body = `{"error":{"code":400,"message":` + string(m) + `,"status":"INVALID_ARGUMENT"}}`
	}
	return providertest.Step{Kind: providertest.StepHTTPError, Status: 400, Body: body}
}

var loremWords = strings.Fields(`lorem ipsum dolor sit amet consectetur adipiscing elit sed do
eiusmod tempor incididunt ut labore et dolore magna aliqua ut enim ad minim veniam quis
nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat`)

func lorem(n int) []string {
	words := make([]string, n)
	for i := range words {
		words[i] = loremWords[i%len(loremWords)] + " "
	}
	return words
}

// ---- stamps ----

// stampPlaceholder is the text of a stamped delta until it is written; the
// stamp that replaces it has the same length.
const stampPlaceholder = "s0000000000000000000a0000000000000000000 "

var placeholder = []byte(stampPlaceholder)

// stampWriter replaces each placeholder of a written frame with the stamp
// of the moment of writing.
type stampWriter struct {
	http.ResponseWriter
	arrival int64
	buf     []byte
}

func (w *stampWriter) Write(p []byte) (int, error) {
	if !bytes.Contains(p, placeholder) {
		return w.ResponseWriter.Write(p)
	}
	stamp := appendStamp(nil, time.Now().UnixNano(), w.arrival)
	w.buf = append(w.buf[:0], p...)
	b := w.buf
	for i := bytes.Index(b, placeholder); i >= 0; {
		copy(b[i:], stamp)
		j := bytes.Index(b[i+len(placeholder):], placeholder)
		if j < 0 {
			break
		}
		i += len(placeholder) + j
	}
	if _, err := w.ResponseWriter.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (w *stampWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes (for callers that assert http.Flusher).
func (w *stampWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func appendStamp(b []byte, write, arrival int64) []byte {
	b = append(b, 's')
	b = appendPadded(b, write)
	b = append(b, 'a')
	b = appendPadded(b, arrival)
	return append(b, ' ')
}

func appendPadded(b []byte, v int64) []byte {
	s := strconv.FormatInt(v, 10)
	for i := len(s); i < 19; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// ErrNoStamp is ParseStamp's error for a text that is not a stamp.
var ErrNoStamp = errors.New("mock: not a stamp")

// ParseStamp reads a stamped delta: the Unix nanoseconds at which the mock
// wrote it and at which its request arrived.
func ParseStamp(s string) (write, arrival int64, err error) {
	if len(s) < 40 || s[0] != 's' || s[20] != 'a' {
		return 0, 0, ErrNoStamp
	}
	write, err1 := strconv.ParseInt(s[1:20], 10, 64)
	arrival, err2 := strconv.ParseInt(s[21:40], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, ErrNoStamp
	}
	return write, arrival, nil
}

// FindStamp finds the first stamp in b (a raw frame, any format) without
// decoding it.
func FindStamp(b []byte) (write, arrival int64, ok bool) {
	for i := 0; i+40 <= len(b); i++ {
		j := bytes.IndexByte(b[i:], 's')
		if j < 0 || i+j+40 > len(b) {
			return 0, 0, false
		}
		i += j
		if b[i+20] == 'a' && allDigits(b[i+1:i+20]) && allDigits(b[i+21:i+40]) {
			w, _ := strconv.ParseInt(string(b[i+1:i+20]), 10, 64)
			a, _ := strconv.ParseInt(string(b[i+21:i+40]), 10, 64)
			return w, a, true
		}
	}
	return 0, 0, false
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// TokenPath is the mock's OAuth 2.0 token endpoint, for the kinds that
// authenticate with access tokens: point a vertex provider's token_url,
// or an azure-openai provider's with entra_id, at it.
const TokenPath = "/mock/token"

// serveToken answers a token request of Google's JWT bearer grant or the
// client-credentials grant with a new access token valid for an hour. It
// checks the grant's form, not its signature or secret: the mock serves
// load and chaos tests, not authentication tests (providertest's
// TokenServer verifies).
func (m *Mock) serveToken(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if r.Method != http.MethodPost || r.ParseForm() != nil {
		w.WriteHeader(http.StatusMethodNotAllowed)
		_, _ = io.WriteString(w, `{"error":"invalid_request","error_description":"POST a form"}`)
		return
	}
	grant := r.PostForm.Get("grant_type")
	ok := grant == providertest.GrantJWTBearer && r.PostForm.Get("assertion") != "" ||
		grant == providertest.GrantClientCredentials && r.PostForm.Get("client_id") != ""
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"unsupported_grant_type","error_description":"mock: a jwt-bearer grant with an assertion, or client_credentials with a client_id"}`)
		return
	}
	_, _ = fmt.Fprintf(w, `{"access_token":"%s%d","expires_in":3599,"token_type":"Bearer"}`, mockTokenPrefix, m.tokens.Add(1))
}

// mockTokenPrefix starts every access token the mock issues.
const mockTokenPrefix = "mock-token-"

// issued reports whether tok is an access token the mock issued.
func (m *Mock) issued(tok string) bool {
	n, err := strconv.ParseInt(strings.TrimPrefix(tok, mockTokenPrefix), 10, 64)
	return err == nil && strings.HasPrefix(tok, mockTokenPrefix) && n >= 1 && n <= m.tokens.Load()
}
