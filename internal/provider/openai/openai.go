package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// APIs a Client speaks.
const (
	APIResponses = "responses" // provider kind openai-responses
	APIChat      = "chat"      // provider kind openai-chat
)

// Defaults.
const (
	DefaultBaseURL        = "https://api.openai.com/v1"
	DefaultChainCacheSize = 1024
)

// Options configure a Client.
type Options struct {
	// API is APIResponses (the default) or APIChat; the provider kind names
	// "openai-responses" and "openai-chat" are accepted too.
	API string
	// BaseURL is the API root including its version path, as in the OpenAI
	// SDKs and OPENAI_BASE_URL: requests go to BaseURL+"/responses" or
	// BaseURL+"/chat/completions". A URL with no path at all gets "/v1"
	// ("http://127.0.0.1:8000" means "http://127.0.0.1:8000/v1"); a URL
	// that already ends in the endpoint is used as is; a query string is
	// kept (Azure's "?api-version=…"). Empty: DefaultBaseURL.
	BaseURL string
	// Timeout bounds a whole call, stream included; 0: none beyond the
	// caller's context.
	Timeout time.Duration
	// ReadTimeout bounds the silence of the provider: the wait for the
	// response headers and then between two reads of the stream; 0: none.
	ReadTimeout time.Duration
	// Headers are added to every request (OpenAI-Organization,
	// OpenAI-Project, a gateway's headers); never the credential's header.
	Headers map[string]string
	// AuthHeader is the header that carries the credential's secret:
	// "Authorization" ("Bearer <secret>") when empty; Azure OpenAI takes
	// "api-key" (the raw secret).
	AuthHeader string
	// HTTPClient, when set, sends the requests (its redirect policy is
	// replaced: redirects are never followed). Nil: a client with a
	// transport of its own.
	HTTPClient *http.Client

	// ChainResponses (Responses API only) stores responses (store: true)
	// and chains a session's calls with previous_response_id, sending only
	// the messages the previous response does not cover. Off: every call
	// sends the whole context with store: false.
	ChainResponses bool
	// EncryptedReasoning (Responses API only) keeps reasoning without
	// server-side state: every call sends store: false and include:
	// ["reasoning.encrypted_content"], reasoning items come back with their
	// encrypted content, which the client stores in the message's thinking
	// blocks and sends back as reasoning input items. The alternative to
	// ChainResponses, which it turns off. Leave it off for models without
	// reasoning, which may refuse the include.
	EncryptedReasoning bool
	// ChatNoStreamOptions (Chat API only) leaves out stream_options
	// ({"include_usage": true}), for servers that reject it (Azure OpenAI
	// before api-version 2024-09-01-preview, some compatible servers); the
	// result then has no usage unless the server sends it anyway.
	ChatNoStreamOptions bool
	// Azure speaks Azure OpenAI on a resource (see azure.go): Chat
	// Completions on its deployments, or with API APIResponses the
	// Responses API (the deployment's name as the model).
	Azure bool
	// APIVersion (Azure only) is the api-version query parameter; empty:
	// DefaultAzureAPIVersion (Chat), DefaultAzureResponsesAPIVersion
	// (Responses).
	APIVersion string
	// EntraID (Azure only): the credentials' secrets are Microsoft Entra
	// ID client credentials, "TENANT_ID:CLIENT_ID:CLIENT_SECRET"; each
	// call sends its credential's access token (cached, refreshed before
	// it expires) as "Authorization: Bearer …" instead of an api-key.
	EntraID bool
	// TokenURL (with EntraID) is the token endpoint, "{tenant}" standing
	// for the tenant id; empty: DefaultEntraTokenURL.
	TokenURL string
	// TokenTimeout bounds one token request; 0: oauth.DefaultTimeout.
	TokenTimeout time.Duration
	// TokenHTTPClient, when set, sends the token requests (redirects are
	// never followed).
	TokenHTTPClient *http.Client
	// Now is the clock token expiries are read with; nil: time.Now.
	Now func() time.Time
	// NoPromptCache leaves out prompt_cache_key. By default every request
	// carries its session's id as prompt_cache_key, so that OpenAI routes a
	// session's calls to the machines that hold its cached prefix.
	NoPromptCache bool

	// ChainCacheSize bounds the sessions whose last response is remembered
	// (least recently used first out); 0: DefaultChainCacheSize.
	ChainCacheSize int
}

// Client calls the OpenAI Responses or Chat Completions API (or an
// OpenAI-compatible server). It is safe for concurrent use.
type Client struct {
	opts    Options
	api     string
	url     string
	client  *http.Client
	chain   *chainCache
	entra   *entraAuth // nil: the secret is the key
	headers *wire.Headers
}

var _ provider.Provider = (*Client)(nil)

// New returns a client for opts.
func New(opts Options) *Client {
	api := opts.API
	switch api {
	case "", provider.KindOpenAIResponses:
		api = APIResponses
	case provider.KindOpenAIChat:
		api = APIChat
	}
	if opts.Azure {
		if api != APIResponses || opts.API == "" {
			api = APIChat
		}
		opts = azureOptions(opts, api)
	}
	if opts.AuthHeader == "" {
		opts.AuthHeader = "Authorization"
	}
	if opts.ChainCacheSize <= 0 {
		opts.ChainCacheSize = DefaultChainCacheSize
	}
	c := &Client{opts: opts, api: api, client: wire.NewHTTPClient(opts.HTTPClient), headers: wire.NewHeaders(opts.AuthHeader, opts.Headers)}
	if opts.Azure && opts.EntraID {
		c.entra = newEntraAuth(opts)
	}
	switch api {
	case APIResponses:
		c.url = endpoint(opts.BaseURL, "/responses")
		if opts.Azure {
			c.url = azureResponsesURL(opts.BaseURL, opts.APIVersion)
		}
		if opts.ChainResponses && !opts.EncryptedReasoning {
			c.chain = newChainCache(opts.ChainCacheSize)
		}
	case APIChat:
		c.url = endpoint(opts.BaseURL, "/chat/completions")
		if opts.Azure {
			c.url = azureURL(opts.BaseURL, azureDeploymentPlaceholder, opts.APIVersion)
		}
	}
	return c
}

// endpoint is the URL of an endpoint under base (see Options.BaseURL).
func endpoint(base, path string) string {
	base = strings.TrimSpace(base)
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimRight(base, "/") + path
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, path):
	case p == "":
		p = "/v1" + path
	default:
		p += path
	}
	u.Path, u.RawPath = p, ""
	return u.String()
}

// URL is the endpoint the client posts to ("" for an unknown API; with
// Azure, "{deployment}" stands for the request's model).
func (c *Client) URL() string { return c.url }

// CloseIdleConnections closes the idle connections of the client's
// transport.
func (c *Client) CloseIdleConnections() {
	c.client.CloseIdleConnections()
	if c.entra != nil {
		c.entra.tokens.CloseIdleConnections()
	}
}

// Forget drops what the client remembers of a session (its last response
// id, with ChainResponses): the session's next call sends its whole
// context. Call it when a session is deleted.
func (c *Client) Forget(sessionID string) {
	if c.chain != nil {
		c.chain.remove(sessionID)
	}
}

// Stream makes one streaming call. It returns when the stream ends, fails
// or ctx is done, delivers deltas through onDelta from the calling
// goroutine as they arrive, and starts no goroutine that outlives it.
//
// With Entra ID the call first takes its credential's access token, which
// is then the call's secret (the header's, the one redacted from errors);
// a token that cannot be had fails the call before any request to the
// model, and one the model refuses (401) is dropped.
func (c *Client) Stream(ctx context.Context, req *provider.Request, onDelta func(provider.Delta)) (res provider.Result) {
	if c.entra != nil {
		tok, src, failed := c.entra.token(ctx, req, onDelta)
		if failed != nil {
			return *failed
		}
		defer func() {
			if res.Failure != nil && res.Failure.Status == http.StatusUnauthorized {
				src.Invalidate(tok)
			}
		}()
		r := *req
		r.Credential.Secret = tok
		req = &r
	}
	a := wire.NewAcc(req.Model, req.Credential.Secret, onDelta)
	a.Answered = req.Answered
	switch c.api {
	case APIResponses:
		return c.streamResponses(ctx, req, a)
	case APIChat:
		return c.streamChat(ctx, req, a)
	}
	return a.Fail("openai: unknown API "+jsonQuote(c.api)+` (want "responses" or "chat")`, "", nil)
}

// newRequest builds the POST of body with the client's headers.
func (c *Client) newRequest(req *provider.Request, body any) (*http.Request, error) {
	var b []byte
	var err error
	switch body := body.(type) {
	case *chatRequest:
		b, err = encodeChat(body)
	case *responsesRequest:
		b, err = encodeResponses(body)
	default:
		b, err = json.Marshal(body)
	}
	if err != nil {
		return nil, err
	}
	u := c.url
	if c.opts.Azure && c.api == APIChat {
		u = azureURL(c.opts.BaseURL, req.Model, c.opts.APIVersion)
	}
	return c.headers.Request(u, b, req.Credential.Secret)
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
