package providertest

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// BedrockHandler is a fake Amazon Bedrock runtime: it answers
//
//	POST /model/{modelId}/converse-stream
//
// with Bedrock's binary event stream (application/vnd.amazon.eventstream:
// prelude, headers, payload and CRC32s, encoded by the AWS SDK's own
// eventstream encoder), each event a frame with the headers
// ":event-type", ":content-type" and ":message-type" "event" and a JSON
// payload padded with Bedrock's "p" field; an exception in the stream is a
// frame with ":exception-type" (throttlingException, …) and
// ":message-type" "exception". Error answers are Bedrock's: the status, a
// JSON body {"message": …} and the x-amzn-ErrorType header naming the
// exception.
//
// Each request plays one Step (Enqueue, else Script, else the default
// answer), as [Handler] does: StepOK, StepHTTPError (ErrorType is the
// exception name; empty: the status's, see BedrockException), StepErrorEvent
// (After body events, then the exception ErrorType, lower camel case as
// on the wire; empty: throttlingException), StepCut and StepHang. An
// answer streams messageStart; its Redacted and Thinking as one
// reasoningContent block (redactedContent, then text deltas and a
// signature, BedrockSignature); its text as one block; each tool call as
// a toolUse block (contentBlockStart with its id and name, input deltas,
// contentBlockStop); then messageStop and metadata (usage). It is safe for
// concurrent use.
type BedrockHandler struct {
	// Script, when set, decides the step of a request when the queue is
	// empty.
	Script func(*Request) Step

	mu      sync.Mutex
	queue   []Step
	reqs    []*Request
	changed chan struct{}

	closed    chan struct{}
	closeOnce sync.Once
}

// NewBedrockHandler returns a fake Bedrock runtime.
func NewBedrockHandler() *BedrockHandler {
	return &BedrockHandler{changed: make(chan struct{}), closed: make(chan struct{})}
}

// Enqueue appends steps to the fault script.
func (h *BedrockHandler) Enqueue(steps ...Step) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queue = append(h.queue, steps...)
}

// Requests returns a snapshot of every request received so far.
func (h *BedrockHandler) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Request, len(h.reqs))
	for i, r := range h.reqs {
		out[i] = *r
		out[i].Header = r.Header.Clone()
	}
	return out
}

// WaitRequests waits until at least n requests are done and returns the
// snapshot then, or ctx's error.
func (h *BedrockHandler) WaitRequests(ctx context.Context, n int) ([]Request, error) {
	for {
		h.mu.Lock()
		done := 0
		for _, r := range h.reqs {
			if r.Done {
				done++
			}
		}
		ch := h.changed
		h.mu.Unlock()
		if done >= n {
			return h.Requests(), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("providertest: waiting for %d done Bedrock requests (%d so far): %w", n, done, ctx.Err())
		}
	}
}

// Close ends every hang in progress.
func (h *BedrockHandler) Close() { h.closeOnce.Do(func() { close(h.closed) }) }

// KindBedrock is the Kind of a recorded Bedrock request.
const KindBedrock = "bedrock"

// BedrockException is the exception Bedrock answers a status with:
// 400 ValidationException, 403 AccessDeniedException, 404
// ResourceNotFoundException, 408 ModelTimeoutException, 424
// ModelErrorException, 429 ThrottlingException, 503
// ServiceUnavailableException, anything else InternalServerException.
func BedrockException(status int) string {
	switch status {
	case 400:
		return "ValidationException"
	case 403:
		return "AccessDeniedException"
	case 404:
		return "ResourceNotFoundException"
	case 408:
		return "ModelTimeoutException"
	case 424:
		return "ModelErrorException"
	case 429:
		return "ThrottlingException"
	case 503:
		return "ServiceUnavailableException"
	}
	return "InternalServerException"
}

// Bedrock's wordings (AWS documentation and the Bedrock user guide's
// troubleshooting pages).
const (
	BedrockTooManyRequests    = "Too many requests, please wait before trying again."
	BedrockTooManyTokensDaily = "Too many tokens per day, please wait before trying again."
	BedrockUnavailable        = "Bedrock is unable to process your request."
	BedrockStreamError        = "The system encountered an unexpected error during processing. Try your request again."
	BedrockInputTooLong       = "Input is too long for requested model."
	BedrockAccessDenied       = "You don't have access to the model with the specified model ID."
)

// bedrockMessage is an exception's default message.
func bedrockMessage(exception string) string {
	switch strings.ToLower(exception) {
	case "throttlingexception":
		return BedrockTooManyRequests
	case "serviceunavailableexception":
		return BedrockUnavailable
	case "modelstreamerrorexception":
		return BedrockStreamError
	case "validationexception":
		return BedrockInputTooLong
	case "accessdeniedexception":
		return BedrockAccessDenied
	}
	return "The server encountered an internal error while processing the request."
}

// BedrockSignature is the signature the fake gives a reasoning block of
// thinking text for model (Bedrock's is opaque; this one is deterministic).
func BedrockSignature(model, thinking string) string {
	return AnthropicSignature("bedrock", model, thinking)
}

func (h *BedrockHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	model := ""
	if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/model/"); ok {
		if m, ok := strings.CutSuffix(rest, "/converse-stream"); ok {
			model, _ = url.PathUnescape(m)
		}
	}
	h.mu.Lock()
	req := &Request{Index: len(h.reqs), Kind: KindBedrock, Method: r.Method, RemoteAddr: r.RemoteAddr,
		Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body, Model: model}
	h.reqs = append(h.reqs, req)
	var step Step
	if len(h.queue) > 0 {
		step, h.queue = h.queue[0], h.queue[1:]
	} else if h.Script != nil {
		h.mu.Unlock()
		step = h.Script(req)
		h.mu.Lock()
	}
	req.Step = step
	h.mu.Unlock()

	defer func() {
		h.mu.Lock()
		req.Done = true
		req.ClientGone = r.Context().Err() != nil
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
	}()
	if r.Method != http.MethodPost || model == "" {
		bedrockError(w, http.StatusNotFound, "UnknownOperationException", "")
		return
	}
	w.Header().Set("X-Amzn-Requestid", fmt.Sprintf("5f3c2a1e-0000-4000-8000-%012d", req.Index))
	for k, vs := range step.Headers {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if step.Delay > 0 && !h.wait(r.Context(), step.Delay) {
		return
	}
	switch step.Kind {
	case StepHTTPError:
		exc := step.ErrorType
		if exc == "" {
			exc = BedrockException(step.Status)
		}
		if step.Body != "" {
			w.Header().Set("X-Amzn-Errortype", exc+":http://internal.amazon.com/coral/com.amazon.bedrock/")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(step.Status)
			_, _ = io.WriteString(w, step.Body)
			return
		}
		bedrockError(w, step.Status, exc, step.ErrorMessage)
		return
	case StepHang:
		if step.BeforeHeaders {
			h.wait(r.Context(), -1)
			return
		}
	}
	a := step.Answer
	if a == nil {
		a = DefaultAnswer()
	}
	if a.Model == "" {
		a2 := *a
		a2.Model = model
		a = &a2
	}
	events := BedrockEvents(a)
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	send := func(fs [][]byte) bool {
		for _, f := range fs {
			if _, err := w.Write(f); err != nil {
				return false
			}
			if fl != nil {
				fl.Flush()
			}
			if step.ChunkDelay > 0 && !h.wait(r.Context(), step.ChunkDelay) {
				return false
			}
		}
		return true
	}
	pre, mid := events[:1], events[1:len(events)-2]
	switch step.Kind {
	case StepErrorEvent, StepCut, StepHang:
		n := min(step.After, len(mid))
		if !step.SkipPreamble && !send(pre) {
			return
		}
		if !send(mid[:n]) {
			return
		}
		switch step.Kind {
		case StepErrorEvent:
			exc := step.ErrorType
			if exc == "" {
				exc = "throttlingException"
			}
			exc = strings.ToLower(exc[:1]) + exc[1:]
			msg := step.ErrorMessage
			if msg == "" {
				msg = bedrockMessage(exc)
			}
			send([][]byte{BedrockExceptionFrame(exc, msg)})
		case StepHang:
			h.wait(r.Context(), -1)
		}
		return
	}
	send(events)
}

// wait waits d (forever when d < 0) or until the client goes away or the
// handler is closed; it reports whether d passed.
func (h *BedrockHandler) wait(ctx context.Context, d time.Duration) bool {
	var tc <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-tc:
		return true
	case <-ctx.Done():
	case <-h.closed:
	}
	return false
}

// bedrockError writes Bedrock's error answer.
func bedrockError(w http.ResponseWriter, status int, exception, msg string) {
	if msg == "" {
		msg = bedrockMessage(exception)
	}
	w.Header().Set("X-Amzn-Errortype", exception+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"message":`+jsonString(msg)+`}`)
}

// bedrockPad is Bedrock's "p" padding field, which hides the length of
// what an event carries.
const bedrockPad = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"

// BedrockEventFrame encodes one event frame.
func BedrockEventFrame(eventType, payload string) []byte {
	return bedrockFrame(eventstream.Headers{
		{Name: ":event-type", Value: eventstream.StringValue(eventType)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
		{Name: ":message-type", Value: eventstream.StringValue("event")},
	}, payload)
}

// BedrockExceptionFrame encodes an exception frame: exception is the
// stream member's name (throttlingException, serviceUnavailableException,
// modelStreamErrorException, validationException, internalServerException).
func BedrockExceptionFrame(exception, msg string) []byte {
	payload := `{"message":` + jsonString(msg) + `}`
	if exception == "modelStreamErrorException" {
		payload = `{"message":` + jsonString(msg) + `,"originalMessage":` + jsonString(msg) + `,"originalStatusCode":500}`
	}
	return bedrockFrame(eventstream.Headers{
		{Name: ":exception-type", Value: eventstream.StringValue(exception)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
		{Name: ":message-type", Value: eventstream.StringValue("exception")},
	}, payload)
}

func bedrockFrame(h eventstream.Headers, payload string) []byte {
	var b bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&b, eventstream.Message{Headers: h, Payload: []byte(payload)}); err != nil {
		panic("providertest: encoding an event stream frame: " + err.Error())
	}
	return b.Bytes()
}

// BedrockEvents are the frames of an answer's stream: messageStart, the
// content blocks' events, messageStop and metadata.
func BedrockEvents(a *Answer) [][]byte {
	ev := func(typ string, fields ...kv) []byte {
		return BedrockEventFrame(typ, enc(false, append(obj(fields), kv{"p", bedrockPad[:len(typ)]})))
	}
	out := [][]byte{ev("messageStart", kv{"role", "assistant"})}
	idx := 0
	deltas := 0
	if len(a.Redacted) > 0 || len(a.Thinking) > 0 || a.EmptyThinking {
		for _, r := range a.Redacted {
			out = append(out, ev("contentBlockDelta", kv{"contentBlockIndex", idx},
				kv{"delta", obj{{"reasoningContent", obj{{"redactedContent", base64.StdEncoding.EncodeToString([]byte(r))}}}}}))
		}
		var thinking strings.Builder
		for _, t := range a.Thinking {
			thinking.WriteString(t)
			deltas++
			out = append(out, ev("contentBlockDelta", kv{"contentBlockIndex", idx},
				kv{"delta", obj{{"reasoningContent", obj{{"text", t}}}}}))
		}
		if len(a.Thinking) > 0 || a.EmptyThinking {
			out = append(out, ev("contentBlockDelta", kv{"contentBlockIndex", idx},
				kv{"delta", obj{{"reasoningContent", obj{{"signature", BedrockSignature(a.Model, thinking.String())}}}}}))
		}
		out = append(out, ev("contentBlockStop", kv{"contentBlockIndex", idx}))
		idx++
	}
	if len(a.Text) > 0 {
		for _, t := range a.Text {
			deltas++
			out = append(out, ev("contentBlockDelta", kv{"contentBlockIndex", idx}, kv{"delta", obj{{"text", t}}}))
		}
		out = append(out, ev("contentBlockStop", kv{"contentBlockIndex", idx}))
		idx++
	}
	for i, t := range a.Tools {
		id := t.ID
		if id == "" {
			id = "tooluse_" + strconv.Itoa(i) + "Xk3mQ9vR2pLw8sTn"
		}
		out = append(out, ev("contentBlockStart", kv{"contentBlockIndex", idx},
			kv{"start", obj{{"toolUse", obj{{"toolUseId", id}, {"name", t.Name}}}}}))
		for _, p := range t.Args {
			deltas++
			out = append(out, ev("contentBlockDelta", kv{"contentBlockIndex", idx}, kv{"delta", obj{{"toolUse", obj{{"input", p}}}}}))
		}
		out = append(out, ev("contentBlockStop", kv{"contentBlockIndex", idx}))
		idx++
	}
	stop := "end_turn"
	switch {
	case a.Stop == StopLength:
		stop = "max_tokens"
	case a.Stop == StopContentFilter:
		stop = "content_filtered"
	case len(a.Tools) > 0:
		stop = "tool_use"
	}
	in, outTok := a.InputTokens, a.OutputTokens
	if in == 0 {
		in = 25
	}
	if outTok == 0 {
		outTok = deltas
	}
	out = append(out, ev("messageStop", kv{"stopReason", stop}))
	usage := obj{{"inputTokens", in}, {"outputTokens", outTok}, {"totalTokens", in + outTok + a.CacheReadTokens + a.CacheWriteTokens}}
	if a.CacheReadTokens > 0 {
		usage = append(usage, kv{"cacheReadInputTokens", a.CacheReadTokens})
	}
	if a.CacheWriteTokens > 0 {
		usage = append(usage, kv{"cacheWriteInputTokens", a.CacheWriteTokens})
	}
	out = append(out, ev("metadata",
		kv{"usage", usage},
		kv{"metrics", obj{{"latencyMs", 412}}}))
	return out
}

// BedrockServer is a BedrockHandler listening on a loopback port.
type BedrockServer struct {
	*BedrockHandler
	// URL is the endpoint to give the client, e.g. "http://127.0.0.1:41234".
	URL string
	srv *httptest.Server
}

// NewBedrockServer starts a fake Bedrock runtime on a loopback port.
func NewBedrockServer() *BedrockServer {
	h := NewBedrockHandler()
	srv := httptest.NewServer(h)
	return &BedrockServer{BedrockHandler: h, URL: srv.URL, srv: srv}
}

// Close ends every request in progress and stops the server.
func (s *BedrockServer) Close() {
	s.BedrockHandler.Close()
	s.srv.Close()
}
