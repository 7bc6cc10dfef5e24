package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

var (
	errTimeout     = errors.New("request timeout")
	errReadTimeout = errors.New("read timeout")
	errDrain       = errors.New("drained")
)

// Call is one HTTP call with its timeouts, as [Run] makes it. Its context
// ends with the caller's, when the call's timeout passes (errTimeout) or
// when no byte arrived for its read timeout (errReadTimeout, from waiting
// for the response headers on). close closes the response body (which
// closes the connection when the body was not read to its end) and
// releases the timers; no goroutine outlives it.
type Call struct {
	parent      context.Context
	ctx         context.Context
	cancel      context.CancelCauseFunc
	stopTimeout context.CancelFunc
	timer       *time.Timer
	timeout     time.Duration
	readTimeout time.Duration
	resp        *http.Response
}

func newCall(parent context.Context, timeout, readTimeout time.Duration) *Call {
	c := &Call{parent: parent, timeout: timeout, readTimeout: readTimeout, stopTimeout: func() {}}
	ctx := parent
	if timeout > 0 {
		ctx, c.stopTimeout = context.WithTimeoutCause(parent, timeout, errTimeout)
	}
	c.ctx, c.cancel = context.WithCancelCause(ctx)
	if readTimeout > 0 {
		c.timer = time.AfterFunc(readTimeout, func() { c.cancel(errReadTimeout) })
	}
	return c
}

// do sends req (which must carry c.ctx).
func (c *Call) do(client *http.Client, req *http.Request) error {
	resp, err := client.Do(req) //nolint:bodyclose // kept in c.resp; Call.Close closes it
	if err != nil {
		return err
	}
	c.touch()
	resp.Body = &touchBody{ReadCloser: resp.Body, c: c}
	c.resp = resp
	return nil
}

// touch restarts the read timeout: a byte arrived.
func (c *Call) touch() {
	if c.timer != nil {
		c.timer.Reset(c.readTimeout)
	}
}

func (c *Call) close() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.resp != nil {
		_ = c.resp.Body.Close()
	}
	c.cancel(nil)
	c.stopTimeout()
}

// drainTime bounds the wait for the end of a body after its terminal
// event.
const drainTime = 250 * time.Millisecond

// drain reads what is left of the body after a terminal event (the end of
// the chunked body, normally at once), so that an HTTP/1.1 connection goes
// back to the pool instead of being closed; a body that does not end within
// drainTime, or holds more than 64 KiB, is cut and its connection closed.
func (c *Call) drain() {
	t := time.AfterFunc(drainTime, func() { c.cancel(errDrain) })
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(c.resp.Body, 64<<10))
}

// touchBody restarts the read timeout whenever bytes arrive.
type touchBody struct {
	io.ReadCloser
	c *Call
}

func (b *touchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.touch()
	}
	return n, err
}

// aborted reports whether the caller's context is done.
func (c *Call) aborted() bool { return c.parent.Err() != nil }

// errorText is the message of a transport failure: the Go error's text, or
// which timeout ended the call.
func (c *Call) errorText(err error) string {
	switch cause := context.Cause(c.ctx); {
	case errors.Is(cause, errReadTimeout):
		return fmt.Sprintf("stream read timed out: no data from the provider for %v", c.readTimeout)
	case errors.Is(cause, errTimeout):
		return fmt.Sprintf("request timed out after %v: %v", c.timeout, err)
	}
	return err.Error()
}

// Failure is what a failure of c knows about the response: none before it
// arrived (status 0), its status and headers after. Each call returns a
// new Failure, which the caller may complete.
func (c *Call) Failure() *provider.Failure {
	if c.resp == nil {
		return &provider.Failure{}
	}
	return &provider.Failure{Status: c.resp.StatusCode, Headers: c.resp.Header.Clone()}
}

// rateLimitHeaders copies the rate-limit headers of h (nil when it has
// none: no allocation on a response without them).
func rateLimitHeaders(h http.Header) http.Header {
	var out http.Header
	for k, vs := range h {
		if hasPrefixFold(k, "anthropic-ratelimit-") || hasPrefixFold(k, "x-ratelimit-") {
			if out == nil {
				out = http.Header{}
			}
			out[k] = append([]string(nil), vs...)
		}
	}
	return out
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// NewHTTPClient returns the client calls go through: c (or, when c is nil,
// a client with a transport of its own), never following redirects, so
// that the key never goes anywhere but the configured host (Go strips
// Authorization on a cross-host redirect, but not x-api-key or api-key).
func NewHTTPClient(c *http.Client) *http.Client {
	var cl http.Client
	if c != nil {
		cl = *c
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Many sessions stream from one provider host at once: keep their
		// connections for reuse (the default keeps 2 per host, so most
		// calls under load would dial and handshake anew).
		t.MaxIdleConns = 0
		t.MaxIdleConnsPerHost = 1024
		cl.Transport = t
	}
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cl
}

// NewRequest builds the POST to url of a streaming call's JSON body: it
// sets Content-Type (application/json) and Accept (text/event-stream),
// then each of headers in turn (a later one may replace what was set
// before), then, when secret is not empty, the credential's header:
// authHeader "Authorization" (in any case) carries "Bearer <secret>", any
// other the secret itself. A client makes its [Headers] once instead.
func NewRequest(url string, body []byte, authHeader, secret string, headers ...map[string]string) (*http.Request, error) {
	return NewHeaders(authHeader, headers...).Request(url, body, secret)
}

// Headers are the headers of a client's streaming calls, made once (keys
// in canonical form, values in one backing array), so that a call copies
// them in one step instead of setting each.
type Headers struct {
	fixed  http.Header // Content-Type, Accept, then the client's headers
	auth   string      // the credential's header, canonical
	bearer bool        // it is Authorization: "Bearer <secret>"
}

// NewHeaders makes the headers [NewRequest] sets, for its authHeader and
// headers.
func NewHeaders(authHeader string, headers ...map[string]string) *Headers {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	for _, hs := range headers {
		for k, v := range hs {
			h.Set(k, v)
		}
	}
	hs := &Headers{auth: http.CanonicalHeaderKey(authHeader), bearer: strings.EqualFold(authHeader, "authorization")}
	hs.fixed = h.Clone()
	return hs
}

// Request builds the POST to url of body with the headers and, when secret
// is not empty, the credential's header.
func (hs *Headers) Request(url string, body []byte, secret string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = hs.fixed.Clone()
	if secret != "" {
		if hs.bearer {
			secret = "Bearer " + secret
		}
		req.Header[hs.auth] = []string{secret} // replaces a fixed one
	}
	return req, nil
}

// A Handler interprets the events of one streaming call for [Run].
type Handler interface {
	// Handle interprets one event. It returns a result when the event ends
	// the call, or an error when the stream cannot be understood (a
	// protocol error, which ends the call as a failure).
	Handle(c *Call, ev Event) (*provider.Result, error)
	// Cut ends a call whose stream ended before its terminal event: err is
	// io.EOF for a clean end of the body, else the read error.
	Cut(c *Call, err error) provider.Result
}

// Run sends a streaming request through client and reads its events,
// within timeout for the whole call and readTimeout for any silence of the
// provider (0: no bound but ctx). It handles what is common to every kind
// of call: transport failures, error answers, the read loop, cancellation
// and timeouts; h interprets the events, and a holds what streamed. Run
// returns when the call ends, closes the response body on every path (read
// to its end after a terminal event, so that the connection is reused) and
// starts no goroutine that outlives it.
func Run(ctx context.Context, client *http.Client, req *http.Request, timeout, readTimeout time.Duration, a *Acc, h Handler) provider.Result {
	c := newCall(ctx, timeout, readTimeout)
	defer c.close()
	if err := c.do(client, req.WithContext(c.ctx)); err != nil {
		if c.aborted() {
			return a.aborted()
		}
		return a.Fail(c.errorText(err), "", c.Failure())
	}
	// An error answer, or a 200 that is not a stream but a JSON body (a
	// proxy's error, a server ignoring "stream": true).
	jsonBody := strings.HasPrefix(strings.ToLower(c.resp.Header.Get("Content-Type")), "application/json")
	if c.resp.StatusCode != http.StatusOK || jsonBody {
		e, err := readErrorBody(c.resp.Body)
		if err != nil && c.aborted() {
			return a.aborted()
		}
		switch {
		case err != nil && e == (APIError{}):
			// The body could not be read: say why, after the status.
			e.Message = "reading the error body: " + c.errorText(err)
		case c.resp.StatusCode == http.StatusOK && e.Message == "" && e.Type == "":
			e.Message = "expected an event stream, got a JSON body without an error"
		}
		return a.FailAPI(c, e)
	}
	if a.Answered != nil {
		a.Answered()
	}
	r := newSSEReader(c.resp.Body)
	defer r.release()
	yielded := false
	for {
		ev, err := r.next()
		if err == nil {
			var res *provider.Result
			res, err = h.Handle(c, ev)
			if res != nil {
				c.drain()
				if res.Message.StopReason != provider.StopError {
					res.RateLimit = rateLimitHeaders(c.resp.Header)
				}
				return *res
			}
			if err == nil {
				if !yielded && a.deltas > 0 && r.r.Buffered() == 0 {
					// The first delta is out and its readers are ready,
					// the next frame is not here yet: this goroutine's
					// read would find nothing and park. The readers get
					// this processor first, not after that read (or on
					// another processor, woken for them): the first
					// token's way out is shorter by that much.
					yielded = true
					runtime.Gosched()
				}
				continue
			}
			// A protocol error: the stream cannot be understood.
			return a.Fail(err.Error(), "", c.Failure())
		}
		if c.aborted() {
			return a.aborted()
		}
		if cause := context.Cause(c.ctx); errors.Is(cause, errTimeout) || errors.Is(cause, errReadTimeout) {
			return a.Fail(c.errorText(err), "", c.Failure())
		}
		return h.Cut(c, err)
	}
}
