package gemini

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// DefaultBaseURL is the Gemini API (Google AI) root, with its version.
const DefaultBaseURL = "https://generativelanguage.googleapis.com/v1beta"

// Options configure a Client.
type Options struct {
	// BaseURL is the API root including its version path, as in Google's
	// SDKs: requests go to BaseURL+"/models/{model}:streamGenerateContent?alt=sse".
	// A URL with no path at all gets "/v1beta". Empty: DefaultBaseURL.
	BaseURL string
	// Timeout bounds a whole call, stream included; 0: none beyond the
	// caller's context.
	Timeout time.Duration
	// ReadTimeout bounds the silence of the provider: the wait for the
	// response headers and then between two reads of the stream; 0: none.
	ReadTimeout time.Duration
	// Headers are added to every request (a gateway's headers); never the
	// credential's header.
	Headers map[string]string
	// AuthHeader is the header that carries the credential's secret:
	// "x-goog-api-key" when empty; "Authorization" sends "Bearer <secret>"
	// (an OAuth access token, a gateway).
	AuthHeader string
	// HTTPClient, when set, sends the requests (its redirect policy is
	// replaced: redirects are never followed). Nil: a client with a
	// transport of its own.
	HTTPClient *http.Client
	// Vertex, when set, makes the client call the Gemini API on Vertex AI
	// (provider kind "vertex") with OAuth 2.0 access tokens: BaseURL's
	// default is then the location's endpoint with "/v1", AuthHeader's
	// "Authorization", and each call's credential secret is a
	// service-account key (JSON), or empty for the application default
	// credentials.
	Vertex *VertexOptions
}

// Client calls the Gemini API's streamGenerateContent. It is safe for
// concurrent use.
type Client struct {
	opts    Options
	base    string
	client  *http.Client
	vertex  *vertexAuth // nil: Google AI
	headers *wire.Headers
}

var _ provider.Provider = (*Client)(nil)

// New returns a client for opts.
func New(opts Options) *Client {
	if opts.Vertex != nil {
		if opts.AuthHeader == "" {
			opts.AuthHeader = "Authorization"
		}
		v := newVertexAuth(*opts.Vertex)
		return &Client{opts: opts, base: vertexBaseURL(opts.BaseURL, v.opts.Location), client: wire.NewHTTPClient(opts.HTTPClient), vertex: v,
			headers: wire.NewHeaders(opts.AuthHeader, opts.Headers)}
	}
	if opts.AuthHeader == "" {
		opts.AuthHeader = "x-goog-api-key"
	}
	return &Client{opts: opts, base: baseURL(opts.BaseURL), client: wire.NewHTTPClient(opts.HTTPClient), headers: wire.NewHeaders(opts.AuthHeader, opts.Headers)}
}

// baseURL is the API root of base (see Options.BaseURL), without a
// trailing slash.
func baseURL(base string) string {
	base = strings.TrimSpace(base)
	if base == "" {
		return DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimRight(base, "/")
	}
	p := strings.TrimRight(u.Path, "/")
	if p == "" {
		p = "/v1beta"
	}
	u.Path, u.RawPath, u.RawQuery = p, "", ""
	return u.String()
}

// URL is the endpoint the client posts to for model (on Vertex AI, in
// the configured project; "{project}" when the project is the
// credential's).
func (c *Client) URL(model string) string {
	if c.vertex != nil {
		p := c.vertex.opts.Project
		if p == "" {
			return strings.Replace(c.vertexURL("_", model), "/projects/_/", "/projects/{project}/", 1)
		}
		return c.vertexURL(p, model)
	}
	m := strings.TrimPrefix(model, "models/")
	return c.base + "/models/" + url.PathEscape(m) + ":streamGenerateContent?alt=sse"
}

// CloseIdleConnections closes the idle connections of the client's
// transport.
func (c *Client) CloseIdleConnections() {
	c.client.CloseIdleConnections()
	if c.vertex != nil {
		c.vertex.tokens.CloseIdleConnections()
	}
}

// Stream makes one streaming generateContent call. It returns when the
// stream ends, fails or ctx is done, delivers deltas through onDelta from
// the calling goroutine as they arrive, and starts no goroutine that
// outlives it.
//
// On Vertex AI the call first takes its credential's access token (cached;
// fetched when missing or about to expire): a token that cannot be had
// fails the call before any request to the model (see oauth.Failure), and
// a token the model API refuses (401) is dropped, so that the next call
// fetches another.
func (c *Client) Stream(ctx context.Context, req *provider.Request, onDelta func(provider.Delta)) (res provider.Result) {
	secret, u := req.Credential.Secret, ""
	if c.vertex != nil {
		tok, project, src, failed := c.vertexToken(ctx, req, onDelta)
		if failed != nil {
			return *failed
		}
		defer func() {
			if res.Failure != nil && res.Failure.Status == http.StatusUnauthorized {
				src.Invalidate(tok)
			}
		}()
		// The access token is the call's secret: it goes in the auth
		// header and is redacted from every error; the key stays here.
		secret, u = tok, c.vertexURL(project, req.Model)
	} else {
		u = c.URL(req.Model)
	}
	a := wire.NewAcc(req.Model, secret, onDelta)
	a.Answered = req.Answered
	rb := requestBody(req)
	body, err := encodeRequest(&rb)
	if err != nil {
		return a.Fail("gemini: encoding the request: "+err.Error(), "", nil)
	}
	hreq, err := c.headers.Request(u, body, secret)
	if err != nil {
		return a.Fail("gemini: "+err.Error(), "", nil)
	}
	return wire.Run(ctx, c.client, hreq, c.opts.Timeout, c.opts.ReadTimeout, a, &stream{a: a})
}

var _ wire.Handler = (*stream)(nil)

// stream is the state of one streamGenerateContent stream.
type stream struct {
	a       *wire.Acc
	chunks  int    // chunks seen
	finish  string // the candidate's finishReason, once seen
	block   string // promptFeedback.blockReason
	message string // finishMessage
	part    int    // blocks started: the key of the current one
	last    string // the kind of the current block ("": none open)
	key     string // the key of the current block (see keyFor)
	calls   int    // function calls seen
	respID  string
	buf     chunkBuf // the fast path's reused memory
}

// chunk is a GenerateContentResponse: one data: frame of the stream.
type chunk struct {
	Candidates     []candidate `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *usageMetadata   `json:"usageMetadata"`
	ResponseID    string           `json:"responseId"`
	Error         *json.RawMessage `json:"error"`
}

type candidate struct {
	Content       content `json:"content"`
	FinishReason  string  `json:"finishReason"`
	FinishMessage string  `json:"finishMessage"`
}

// decodeChunk is the reflective decode of any chunk. It is a function of
// its own so that the chunk of the fast path (see chunkBuf.decode) stays
// on Handle's stack.
func decodeChunk(data []byte) (chunk, error) {
	var ch chunk
	err := json.Unmarshal(data, &ch)
	return ch, err
}

type usageMetadata struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
}

// Handle implements wire.Handler.
func (s *stream) Handle(c *wire.Call, ev wire.Event) (*provider.Result, error) {
	var ch chunk
	if !s.buf.decode(ev.Data, &ch) {
		var err error
		if ch, err = decodeChunk(ev.Data); err != nil {
			return nil, fmt.Errorf("gemini: unreadable stream chunk: %v", err)
		}
	}
	a := s.a
	if ch.Error != nil || ev.Type == "error" {
		r := a.FailAPI(c, wire.ParseErrorBody(ev.Data))
		return &r, nil
	}
	s.chunks++
	if ch.ResponseID != "" && s.respID == "" {
		s.respID = ch.ResponseID
	}
	if u := ch.UsageMetadata; u != nil {
		// promptTokenCount includes the cached tokens (agentd's input
		// counts neither cache reads nor writes); thinking tokens are
		// billed as output, and are its reasoning part.
		a.Usage.InputTokens = max(u.PromptTokenCount+u.ToolUsePromptTokenCount-u.CachedContentTokenCount, 0)
		a.Usage.CacheReadTokens = u.CachedContentTokenCount
		a.Usage.OutputTokens = u.CandidatesTokenCount + u.ThoughtsTokenCount
		a.Usage.ReasoningTokens = u.ThoughtsTokenCount
	}
	if pf := ch.PromptFeedback; pf != nil && pf.BlockReason != "" {
		s.block = pf.BlockReason
		r := s.end(c)
		return &r, nil
	}
	if len(ch.Candidates) == 0 {
		return nil, nil
	}
	cand := ch.Candidates[0]
	for _, p := range cand.Content.Parts {
		if err := s.addPart(p); err != nil {
			return nil, err
		}
	}
	if cand.FinishReason != "" {
		s.finish, s.message = cand.FinishReason, cand.FinishMessage
		// The last chunk carries the finish reason (and the final usage);
		// nothing follows it but the end of the body.
		r := s.end(c)
		return &r, nil
	}
	return nil, nil
}

// addPart adds one streamed part. A thought signature becomes a thinking
// block of its own, just before the part it came on (on a thought part, the
// thought's own block), so that the request maps it back onto that part.
// Consecutive thought parts are one thinking block, consecutive text parts
// one text block, each function call a block of its own.
func (s *stream) addPart(p part) error {
	a := s.a
	if p.Thought {
		key := s.keyFor("thought")
		a.StartThinking(key)
		a.AddThinking(key, p.Text)
		if p.ThoughtSignature != "" {
			a.AddSignature(key, p.ThoughtSignature)
			s.last = ""
		}
		return nil
	}
	if p.ThoughtSignature != "" {
		a.AddSignature(s.keyFor("signature"), p.ThoughtSignature)
		s.last = ""
	}
	switch {
	case p.FunctionCall != nil:
		fc := p.FunctionCall
		id := fc.ID
		if id == "" {
			id = s.callID()
		}
		key := s.keyFor("call")
		s.last = ""
		s.calls++
		a.StartTool(key, id, fc.Name)
		args := string(fc.Args)
		if strings.TrimSpace(args) == "" || args == "null" {
			args = "{}"
		}
		a.AddToolArgs(key, args)
		if err := a.EndTool(key, nil); err != nil {
			return fmt.Errorf("gemini: %v", err)
		}
	case p.Text != "":
		a.AddText(s.keyFor("text"), p.Text)
	}
	return nil
}

// keyFor is the block key of the next part of a kind: the current block's
// while the kind goes on, else a new one's.
func (s *stream) keyFor(kind string) string {
	if kind != s.last {
		s.part++
		s.last = kind
		s.key = kind + ":" + strconv.Itoa(s.part)
	}
	return s.key
}

// callID is the id of a function call that came without one: the
// response's id and the call's index (the Gemini API matches results to
// calls by name and order, not id).
func (s *stream) callID() string {
	id := s.respID
	if id == "" {
		id = "gemini"
	}
	return "call_" + id + "_" + strconv.Itoa(s.calls)
}

// end ends a stream at its finish reason (or a blocked prompt).
func (s *stream) end(c *wire.Call) provider.Result {
	a := s.a
	if s.block != "" {
		return a.Fail("Prompt blocked by Gemini (promptFeedback.blockReason "+s.block+")", provider.DetailSensitive, nil)
	}
	switch s.finish {
	case "STOP":
		if a.HasCompletedTool() {
			return a.Finish(provider.StopToolUse)
		}
		return a.Finish(provider.StopEnd)
	case "MAX_TOKENS":
		return a.Finish(provider.StopLength)
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE":
		return a.Fail(finishText(s.finish, s.message, "the answer was stopped by Gemini's content filter"), provider.DetailSensitive, nil)
	}
	// MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL, OTHER and reasons to
	// come: the model's call failed; status 200, the finish reason as the
	// type.
	f := c.Failure()
	f.Type = s.finish
	return a.Fail(finishText(s.finish, s.message, "the model's answer ended abnormally"), "", f)
}

func finishText(reason, message, fallback string) string {
	if message == "" {
		message = fallback
	}
	return reason + ": " + message + " (finishReason " + reason + ")"
}

// Cut implements wire.Handler: a Gemini stream ends with the chunk that
// carries the candidate's finishReason; a body that ends before it is an
// interrupted stream (before any chunk: transient, nothing streamed).
func (s *stream) Cut(c *wire.Call, err error) provider.Result {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if s.chunks == 0 {
		return s.a.Fail("gemini stream ended before its first chunk: "+err.Error(), "", c.Failure())
	}
	return s.a.Fail("stream ended before finishReason: "+err.Error(), "", c.Failure())
}
