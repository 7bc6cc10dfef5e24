package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// Defaults.
const (
	DefaultBaseURL   = "https://api.anthropic.com"
	DefaultVersion   = "2023-06-01"
	DefaultMaxTokens = 8192
)

// Options configure a Client.
type Options struct {
	// BaseURL is the API root, without /v1 (the Anthropic SDKs' and
	// ANTHROPIC_BASE_URL's convention): requests go to BaseURL+"/v1/messages".
	// A trailing "/v1" is tolerated. Empty: DefaultBaseURL.
	BaseURL string
	// Timeout bounds a whole call, stream included; 0: none beyond the
	// caller's context.
	Timeout time.Duration
	// ReadTimeout bounds the silence of the provider: the wait for the
	// response headers and then between two reads of the stream; 0: none.
	ReadTimeout time.Duration
	// Headers are added to every request (anthropic-beta, a gateway's
	// headers, …); they may replace anthropic-version, never the
	// credential's header.
	Headers map[string]string
	// AuthHeader is the header that carries the credential's secret:
	// "x-api-key" when empty; "Authorization" sends "Bearer <secret>"
	// (gateways, OAuth tokens).
	AuthHeader string
	// HTTPClient, when set, sends the requests (its redirect policy is
	// replaced: redirects are never followed). Nil: a client with a
	// transport of its own.
	HTTPClient *http.Client
	// MaxTokens is the max_tokens of every request that does not set
	// Params.MaxTokens, and the room for the answer added to a thinking
	// budget that would not fit below max_tokens; 0: DefaultMaxTokens.
	MaxTokens int
	// Version is the anthropic-version header; empty: DefaultVersion.
	Version string
	// NoPromptCache sends no cache_control marks (see requestBody): the
	// API then caches nothing.
	NoPromptCache bool
}

// Client calls the Anthropic Messages API. It is safe for concurrent use.
type Client struct {
	opts    Options
	url     string
	client  *http.Client
	headers *wire.Headers
}

var _ provider.Provider = (*Client)(nil)

// New returns a client for opts.
func New(opts Options) *Client {
	base := strings.TrimRight(strings.TrimSpace(opts.BaseURL), "/")
	if base == "" {
		base = DefaultBaseURL
	}
	base = strings.TrimSuffix(base, "/v1")
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = DefaultMaxTokens
	}
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	if opts.AuthHeader == "" {
		opts.AuthHeader = "x-api-key"
	}
	// opts.Headers may replace anthropic-version, never the credential's
	// header.
	headers := wire.NewHeaders(opts.AuthHeader, map[string]string{"anthropic-version": opts.Version}, opts.Headers)
	return &Client{opts: opts, url: base + "/v1/messages", client: wire.NewHTTPClient(opts.HTTPClient), headers: headers}
}

// URL is the endpoint the client posts to.
func (c *Client) URL() string { return c.url }

// CloseIdleConnections closes the idle connections of the client's
// transport.
func (c *Client) CloseIdleConnections() { c.client.CloseIdleConnections() }

// Stream makes one streaming Messages call. It returns when the stream
// ends, fails or ctx is done, delivers deltas through onDelta from the
// calling goroutine as they arrive, and starts no goroutine that outlives
// it.
func (c *Client) Stream(ctx context.Context, req *provider.Request, onDelta func(provider.Delta)) provider.Result {
	a := wire.NewAcc(req.Model, req.Credential.Secret, onDelta)
	a.Answered = req.Answered
	wb := c.requestBody(req)
	body, err := encodeRequest(&wb)
	if err != nil {
		return a.Fail("anthropic: encoding the request: "+err.Error(), "", nil)
	}
	hreq, err := c.headers.Request(c.url, body, req.Credential.Secret)
	if err != nil {
		return a.Fail("anthropic: "+err.Error(), "", nil)
	}
	return wire.Run(ctx, c.client, hreq, c.opts.Timeout, c.opts.ReadTimeout, a, &stream{a: a})
}

var _ wire.Handler = (*stream)(nil)

// stream is the state of one Messages stream.
type stream struct {
	a       *wire.Acc
	started bool // message_start seen
	stop    string
	details *stopDetails
}

type stopDetails struct {
	Type        string `json:"type"`
	Category    string `json:"category"`
	Explanation string `json:"explanation"`
}

type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

// event is every Messages stream event's fields that agentd reads.
type event struct {
	Type    string `json:"type"`
	Message struct {
		Usage usage `json:"usage"`
	} `json:"message"`
	Index        int `json:"index"`
	ContentBlock struct {
		Type      string `json:"type"`
		Text      string `json:"text"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
		Data      string `json:"data"`
		ID        string `json:"id"`
		Name      string `json:"name"`
	} `json:"content_block"`
	Delta       eventDelta       `json:"delta"`
	StopDetails *stopDetails     `json:"stop_details"`
	Usage       *usage           `json:"usage"`
	Error       wire.ErrorObject `json:"error"`
}

// eventDelta is the delta of a content_block_delta or message_delta event.
type eventDelta struct {
	Type        string       `json:"type"`
	Text        string       `json:"text"`
	Thinking    string       `json:"thinking"`
	Signature   string       `json:"signature"`
	PartialJSON string       `json:"partial_json"`
	StopReason  string       `json:"stop_reason"`
	StopDetails *stopDetails `json:"stop_details"`
}

// decodeEvent is the reflective decode of any event. It is a function of
// its own so that the event of the fast path (see fastEvent) stays on
// Handle's stack.
func decodeEvent(data []byte) (event, error) {
	var e event
	err := json.Unmarshal(data, &e)
	return e, err
}

// Handle implements wire.Handler.
func (s *stream) Handle(c *wire.Call, ev wire.Event) (*provider.Result, error) {
	var e event
	if !fastEvent(ev.Data, &e) {
		var err error
		if e, err = decodeEvent(ev.Data); err != nil {
			return nil, fmt.Errorf("anthropic: unreadable %q event: %v", ev.Type, err)
		}
	}
	if e.Type == "" {
		e.Type = ev.Type
	}
	a := s.a
	key := strconv.Itoa(e.Index)
	switch e.Type {
	case "message_start":
		s.started = true
		u := e.Message.Usage
		a.Usage = provider.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens}
	case "content_block_start":
		cb := e.ContentBlock
		switch cb.Type {
		case "text":
			a.AddText(key, cb.Text)
		case "thinking":
			a.StartThinking(key)
			a.AddThinking(key, cb.Thinking)
			a.AddSignature(key, cb.Signature)
		case "redacted_thinking":
			a.AddRedactedThinking(key, cb.Data)
		case "tool_use":
			a.StartTool(key, cb.ID, cb.Name)
		}
	case "content_block_delta":
		switch e.Delta.Type {
		case "text_delta":
			a.AddText(key, e.Delta.Text)
		case "thinking_delta":
			a.AddThinking(key, e.Delta.Thinking)
		case "signature_delta":
			a.AddSignature(key, e.Delta.Signature)
		case "input_json_delta":
			a.AddToolArgs(key, e.Delta.PartialJSON)
		}
	case "content_block_stop":
		if err := a.EndTool(key, nil); err != nil {
			return nil, fmt.Errorf("anthropic: %v", err)
		}
	case "message_delta":
		if e.Delta.StopReason != "" {
			s.stop = e.Delta.StopReason
		}
		if d := e.Delta.StopDetails; d != nil {
			s.details = d
		} else if e.StopDetails != nil {
			s.details = e.StopDetails
		}
		if u := e.Usage; u != nil {
			// Counts are cumulative; the input-side ones, when message_delta
			// repeats them, replace message_start's.
			if u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens > 0 {
				a.Usage.InputTokens = u.InputTokens
				a.Usage.CacheReadTokens = u.CacheReadInputTokens
				a.Usage.CacheWriteTokens = u.CacheCreationInputTokens
			}
			a.Usage.OutputTokens = u.OutputTokens
		}
	case "message_stop":
		r := s.end()
		return &r, nil
	case "error":
		r := a.FailAPI(c, e.Error.APIError())
		return &r, nil
	}
	return nil, nil
}

// end ends a stream that reached message_stop.
func (s *stream) end() provider.Result {
	switch s.stop {
	case "max_tokens", "model_context_window_exceeded":
		return s.a.Finish(provider.StopLength)
	case "tool_use":
		return s.a.Finish(provider.StopToolUse)
	case "refusal":
		return s.a.Fail(refusalMessage(s.details), provider.DetailRefusal, nil)
	default: // end_turn, stop_sequence, pause_turn, and stop reasons to come
		return s.a.Finish(provider.StopEnd)
	}
}

// refusalMessage words a refusal stop with its stop_details.
func refusalMessage(d *stopDetails) string {
	msg := "Refusal"
	if d != nil && d.Category != "" {
		msg += " (" + d.Category + ")"
	}
	if d != nil && d.Explanation != "" {
		return msg + ": " + d.Explanation
	}
	return msg + `: the model declined to respond (stop_reason "refusal").`
}

// Cut implements wire.Handler: it ends a stream that ended before
// message_stop. Before message_start it is an envelope error (nothing
// streamed; transient), after it an interrupted stream.
func (s *stream) Cut(c *wire.Call, err error) provider.Result {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if !s.started {
		return s.a.Fail("anthropic stream envelope error: stream ended before message_start: "+err.Error(), "", c.Failure())
	}
	return s.a.Fail("stream ended before message_stop: "+err.Error(), "", c.Failure())
}
