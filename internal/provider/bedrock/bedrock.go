package bedrock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/schemas"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/transport/http/protocol/restjson1"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// DefaultMaxTokens is the room for the answer added to a thinking budget
// when the request sets no max_tokens.
const DefaultMaxTokens = 8192

// Options configure a Client.
type Options struct {
	// Region is the AWS region ("us-east-1"); empty: the standard chain's
	// (AWS_REGION, the shared config's profile).
	Region string
	// Endpoint, when set, replaces the region's endpoint
	// (https://bedrock-runtime.<region>.amazonaws.com): a VPC endpoint, a
	// gateway, a test server.
	Endpoint string
	// Timeout bounds a whole call, stream included; 0: none beyond the
	// caller's context.
	Timeout time.Duration
	// ReadTimeout bounds the silence of the provider: the wait for the
	// response headers and then between two reads of the stream; 0: none.
	ReadTimeout time.Duration
	// HTTPClient, when set, sends the requests (its redirect policy is
	// replaced: redirects are never followed). Nil: a client with a
	// transport of its own.
	HTTPClient *http.Client
	// MaxTokens is the room for the answer added to a thinking budget when
	// Params.MaxTokens is not set or not above it; 0: DefaultMaxTokens.
	MaxTokens int
}

// Client calls Bedrock's ConverseStream. It is safe for concurrent use.
type Client struct {
	opts   Options
	http   *http.Client
	client *bedrockruntime.Client

	// chain is the standard AWS credential chain, resolved on first use
	// by a call without a credential.
	chainOnce   sync.Once
	chain       aws.CredentialsProvider
	chainRegion string
	chainErr    error
}

var _ provider.Provider = (*Client)(nil)

// New returns a client for opts. It reads no credential yet: the
// standard chain is resolved by the first call that needs it.
func New(opts Options) *Client {
	if opts.MaxTokens <= 0 {
		opts.MaxTokens = DefaultMaxTokens
	}
	c := &Client{opts: opts, http: wire.NewHTTPClient(opts.HTTPClient)}
	o := bedrockruntime.Options{
		Region:     opts.Region,
		HTTPClient: doer{c.http},
		// agentd's retry engine classifies and retries: the SDK makes one
		// attempt.
		Retryer:     aws.NopRetryer{},
		Credentials: aws.AnonymousCredentials{}, // replaced on every call
	}
	if opts.Endpoint != "" {
		o.BaseEndpoint = aws.String(strings.TrimRight(opts.Endpoint, "/"))
	}
	c.client = bedrockruntime.New(o)
	return c
}

// CloseIdleConnections closes the idle connections of the client's
// transport.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// defaultChain is the standard AWS chain's credentials and region,
// loaded once (the SDK caches and refreshes the credentials).
func (c *Client) defaultChain(ctx context.Context) (aws.CredentialsProvider, string, error) {
	c.chainOnce.Do(func() {
		// The chain's own HTTP calls (instance metadata, SSO, STS) keep
		// the SDK's defaults; only the region and credentials are used.
		cfg, err := awsconfig.LoadDefaultConfig(context.WithoutCancel(ctx), awsconfig.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }))
		if err != nil {
			c.chainErr = err
			return
		}
		c.chain, c.chainRegion = cfg.Credentials, cfg.Region
	})
	return c.chain, c.chainRegion, c.chainErr
}

// ParseSecret splits a credential's secret, "ACCESS_KEY_ID:SECRET_ACCESS_KEY"
// or "ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN".
func ParseSecret(secret string) (aws.Credentials, error) {
	parts := strings.SplitN(strings.TrimSpace(secret), ":", 3)
	if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return aws.Credentials{}, errors.New(`the credential's secret must be "ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]"`)
	}
	cr := aws.Credentials{AccessKeyID: parts[0], SecretAccessKey: parts[1], Source: "agentd"}
	if len(parts) == 3 {
		cr.SessionToken = parts[2]
	}
	return cr, nil
}

// errReadTimeout and errTimeout are the causes of a call's cancellation
// by its own timeouts.
var (
	errReadTimeout = errors.New("read timeout")
	errTimeout     = errors.New("request timeout")
)

// Stream makes one ConverseStream call. It returns when the stream ends,
// fails or ctx is done, delivers deltas through onDelta from the calling
// goroutine as they arrive, and closes the stream (and its connection,
// unless read to its end) before it returns.
func (c *Client) Stream(ctx context.Context, req *provider.Request, onDelta func(provider.Delta)) provider.Result {
	secret := req.Credential.Secret
	a := wire.NewAcc(req.Model, secret, onDelta)

	var creds aws.CredentialsProvider
	region := c.opts.Region
	if secret != "" {
		cr, err := ParseSecret(secret)
		if err != nil {
			return a.Fail("bedrock: credential "+req.Credential.ID+": "+err.Error(), "", nil)
		}
		creds = credentials.StaticCredentialsProvider{Value: cr}
	}
	if creds == nil || region == "" {
		chain, chainRegion, err := c.defaultChain(ctx)
		if err != nil {
			return a.Fail("bedrock: loading the AWS configuration: "+err.Error(), "", nil)
		}
		if creds == nil {
			creds = chain
		}
		if region == "" {
			region = chainRegion
		}
	}
	if region == "" {
		return a.Fail("bedrock: no AWS region: set the provider's region or AWS_REGION", "", nil)
	}
	input, err := c.input(req)
	if err != nil {
		return a.Fail("bedrock: "+err.Error(), "", nil)
	}

	call := newCall(ctx, c.opts.Timeout, c.opts.ReadTimeout)
	defer call.close()
	out, err := c.client.ConverseStream(call.ctx, input, func(o *bedrockruntime.Options) {
		o.Credentials = creds
		o.Region = region
		// A protocol of the call's own: the SDK's (v1.63.13) restjson1
		// protocol keeps one event stream decoder and payload buffer for
		// every stream of a client, which concurrent streams would share
		// (a data race, TestConcurrentStreams).
		o.Protocol = restjson1.New(schemas.AmazonBedrockFrontendService)
		if secret != "" {
			// The credential's keys sign, even when the environment holds a
			// Bedrock API key (AWS_BEARER_TOKEN_BEDROCK, which the SDK
			// would otherwise prefer).
			o.BearerAuthTokenProvider = nil
			o.AuthSchemePreference = []string{"sigv4"}
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return a.Aborted()
		}
		return c.fail(a, call, err)
	}
	es := out.GetStream()
	defer es.Close()
	s := &stream{a: a}
	events := es.Events()
	for {
		var ev types.ConverseStreamOutput
		var ok bool
		select {
		case ev, ok = <-events:
		case <-call.ctx.Done():
			// The SDK's reader ends when its body does: closing the
			// stream closes the connection.
			_ = es.Close()
			if ctx.Err() != nil {
				return a.Aborted()
			}
			return a.Fail(call.errorText(call.ctx.Err()), "", call.failure())
		}
		if !ok {
			break
		}
		if err := s.handle(ev); err != nil {
			_ = es.Close()
			return a.Fail("bedrock: "+err.Error(), "", call.failure())
		}
	}
	if err := es.Err(); err != nil {
		if ctx.Err() != nil {
			return a.Aborted()
		}
		return c.fail(a, call, err)
	}
	if ctx.Err() != nil {
		return a.Aborted()
	}
	if cause := context.Cause(call.ctx); errors.Is(cause, errTimeout) || errors.Is(cause, errReadTimeout) {
		return a.Fail(call.errorText(cause), "", call.failure())
	}
	return s.end(call)
}

// fail reports err, an error of the SDK: an exception (in the error
// answer or in the stream) as "<status> <ExceptionName>: <message>" with
// the status, headers and exception name in the failure; anything else
// (a transport failure, a timeout) as its text.
func (c *Client) fail(a *wire.Acc, call *callState, err error) provider.Result {
	f := call.failure()
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		f.Status = re.HTTPStatusCode()
		f.Headers = re.Response.Header.Clone()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && (f.Status != 0 || isException(ae)) {
		code, msg := ae.ErrorCode(), ae.ErrorMessage()
		var mse *types.ModelStreamErrorException
		if errors.As(err, &mse) && mse.OriginalMessage != nil && *mse.OriginalMessage != "" {
			orig := *mse.OriginalMessage
			if mse.OriginalStatusCode != nil {
				orig = strconv.Itoa(int(*mse.OriginalStatusCode)) + " " + orig
			}
			msg += " (model: " + orig + ")"
		}
		f.Type = code
		status := f.Status
		if status == 0 {
			status = http.StatusOK
			f.Status = status
		}
		return a.Fail(provider.HTTPErrorMessage(status, code, msg), "", f)
	}
	if cause := context.Cause(call.ctx); errors.Is(cause, errTimeout) || errors.Is(cause, errReadTimeout) {
		return a.Fail(call.errorText(err), "", f)
	}
	return a.Fail("bedrock: "+err.Error(), "", f)
}

// isException reports whether e is one of Bedrock's modelled exceptions
// (in a stream, where no HTTP error answer carries it).
func isException(e smithy.APIError) bool {
	switch e.(type) {
	case *types.ThrottlingException, *types.ServiceUnavailableException, *types.ModelStreamErrorException,
		*types.ValidationException, *types.InternalServerException, *types.ModelTimeoutException,
		*types.AccessDeniedException, *types.ModelNotReadyException, *types.ModelErrorException,
		*types.ResourceNotFoundException, *types.ServiceQuotaExceededException:
		return true
	}
	return false
}

// callState is one call's timeouts and response, shared with the HTTP
// client through the request's context.
type callState struct {
	parent      context.Context
	ctx         context.Context
	cancel      context.CancelCauseFunc
	stopTimeout context.CancelFunc
	timer       *time.Timer
	timeout     time.Duration
	readTimeout time.Duration

	mu   sync.Mutex
	resp *http.Response
}

type callKey struct{}

func newCall(parent context.Context, timeout, readTimeout time.Duration) *callState {
	c := &callState{parent: parent, timeout: timeout, readTimeout: readTimeout, stopTimeout: func() {}}
	ctx := parent
	if timeout > 0 {
		ctx, c.stopTimeout = context.WithTimeoutCause(parent, timeout, errTimeout)
	}
	ctx, c.cancel = context.WithCancelCause(ctx)
	c.ctx = context.WithValue(ctx, callKey{}, c)
	if readTimeout > 0 {
		c.timer = time.AfterFunc(readTimeout, func() { c.cancel(errReadTimeout) })
	}
	return c
}

func (c *callState) touch() {
	if c.timer != nil {
		c.timer.Reset(c.readTimeout)
	}
}

func (c *callState) close() {
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cancel(nil)
	c.stopTimeout()
}

// failure is what a failure knows of the response: nothing before it
// arrived, its status and headers after.
func (c *callState) failure() *provider.Failure {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resp == nil {
		return &provider.Failure{}
	}
	return &provider.Failure{Status: c.resp.StatusCode, Headers: c.resp.Header.Clone()}
}

func (c *callState) errorText(err error) string {
	switch cause := context.Cause(c.ctx); {
	case errors.Is(cause, errReadTimeout):
		return fmt.Sprintf("stream read timed out: no data from the provider for %v", c.readTimeout)
	case errors.Is(cause, errTimeout):
		return fmt.Sprintf("request timed out after %v: %v", c.timeout, err)
	}
	return err.Error()
}

// doer sends the SDK's requests through the client that follows no
// redirect, and records the response and every read of its body in the
// call's state.
type doer struct{ c *http.Client }

func (d doer) Do(r *http.Request) (*http.Response, error) {
	// smithy-go closes the request body as soon as Do returns, while the
	// transport's writer may still be reading it (the read that checks
	// for bytes past Content-Length): that read then fails and the
	// transport closes the connection under the streaming answer. A body
	// of the call's own, read from memory, is never cut.
	if r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		r.ContentLength = int64(len(body))
	}
	resp, err := d.c.Do(r)
	if err != nil {
		return nil, err
	}
	if c, ok := r.Context().Value(callKey{}).(*callState); ok {
		c.touch()
		c.mu.Lock()
		c.resp = resp
		c.mu.Unlock()
		resp.Body = &touchBody{ReadCloser: resp.Body, c: c}
	}
	return resp, nil
}

type touchBody struct {
	io.ReadCloser
	c *callState
}

func (b *touchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.touch()
	}
	return n, err
}
