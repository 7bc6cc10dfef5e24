// Package oauth caches the OAuth 2.0 access tokens that some provider kinds
// authenticate with (Vertex AI: a Google service-account key or the
// application default credentials; Azure OpenAI: an Entra ID client
// secret), and reports a token that cannot be had as a provider failure the
// retry engine classifies.
//
// A Cache holds one Source per credential secret, reused by every call that
// uses that credential; a Source fetches a token when it has none or when
// its token is about to expire, one fetch at a time, and hands the cached
// token to every call in between. The tokens themselves come from
// golang.org/x/oauth2 (the JWT bearer grant of a service-account key, the
// client-credentials grant, the application default credentials).
package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/agentd/agentd/internal/provider"
)

// DefaultTimeout bounds one token request when Options.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// ExpiryMargin is how long before its expiry a token is replaced: a call
// that starts with a token expiring in less than that would risk a 401
// halfway through a long stream.
const ExpiryMargin = time.Minute

// maxSources bounds a Cache: past it the cache starts anew (credentials
// deleted long ago must not keep their parsed keys forever).
const maxSources = 1024

// Fetch gets a new token from the token endpoint; ctx carries the HTTP
// client to use (oauth2.HTTPClient) and bounds the request.
type Fetch func(ctx context.Context) (*oauth2.Token, error)

// Source is one credential's access token, cached. It is safe for
// concurrent use.
type Source struct {
	// lock is held while the token is read or fetched: a channel rather
	// than a mutex, so that a call waiting for another's fetch can give up
	// when its own context ends.
	lock  chan struct{}
	tok   *oauth2.Token
	fetch Fetch
	hc    *http.Client
	now   func() time.Time
	// Value is what the caller keeps beside the token (made with the
	// source, see Cache.Source).
	Value any
}

// Token returns the cached token, or fetches one when there is none or it
// expires within ExpiryMargin. A failed fetch is not cached: the next call
// tries again.
func (s *Source) Token(ctx context.Context) (*oauth2.Token, error) {
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.lock }()
	if s.tok != nil && (s.tok.Expiry.IsZero() || s.now().Add(ExpiryMargin).Before(s.tok.Expiry)) {
		return s.tok, nil
	}
	tok, err := s.fetch(context.WithValue(ctx, oauth2.HTTPClient, s.hc))
	if err != nil {
		return nil, err
	}
	if tok == nil || tok.AccessToken == "" {
		return nil, errors.New("the token endpoint answered without an access_token")
	}
	s.tok = tok
	return tok, nil
}

// Invalidate drops the cached token when it is tok (one the provider
// refused with a 401: revoked, or expired early), so that the next call
// fetches a new one instead of failing until the token's expiry.
func (s *Source) Invalidate(tok string) {
	s.lock <- struct{}{}
	defer func() { <-s.lock }()
	if s.tok != nil && s.tok.AccessToken == tok {
		s.tok = nil
	}
}

// Options configure a Cache.
type Options struct {
	// Timeout bounds one token request; 0: DefaultTimeout.
	Timeout time.Duration
	// HTTPClient, when set, sends the token requests (its redirect policy
	// is replaced: redirects are never followed, a signed assertion or a
	// client secret goes only where it was meant to). Nil: a client with
	// a transport of its own.
	HTTPClient *http.Client
	// Now is the clock token expiries are read with; nil: time.Now.
	Now func() time.Time
}

// Cache holds one Source per credential secret. It is safe for concurrent
// use.
type Cache struct {
	hc      *http.Client
	now     func() time.Time
	mu      sync.Mutex
	sources map[[sha256.Size]byte]*Source
}

// NewCache returns an empty cache.
func NewCache(opts Options) *Cache {
	var hc http.Client
	if opts.HTTPClient != nil {
		hc = *opts.HTTPClient
	} else {
		hc.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc.Timeout = opts.Timeout
	if hc.Timeout <= 0 {
		hc.Timeout = DefaultTimeout
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Cache{hc: &hc, now: now, sources: map[[sha256.Size]byte]*Source{}}
}

// Source returns the source of the credential whose secret is secret (""
// for the ambient credentials of a provider without any), making it with
// newFetch the first time (with the Value it returns). The secret is kept
// only as its digest. An error of newFetch (a malformed key) is returned as
// it is and nothing is cached.
func (c *Cache) Source(secret string, newFetch func() (Fetch, any, error)) (*Source, error) {
	k := sha256.Sum256([]byte(secret))
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sources[k]; ok {
		return s, nil
	}
	f, val, err := newFetch()
	if err != nil {
		return nil, err
	}
	if len(c.sources) >= maxSources {
		c.sources = map[[sha256.Size]byte]*Source{}
	}
	s := &Source{lock: make(chan struct{}, 1), fetch: f, hc: c.hc, now: c.now, Value: val}
	c.sources[k] = s
	return s, nil
}

// CloseIdleConnections closes the idle connections of the token client.
func (c *Cache) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Failure is the report of a token that could not be had, for the retry
// engine: what names the provider ("vertex", "azure-openai"), err is the
// fetch's error.
//
//   - The token endpoint refused the credential (a 4xx other than 408 and
//     429: invalid_grant, invalid_client, unauthorized_client): status 401,
//     type "authentication_error", code the OAuth error code — an
//     authentication failure, not retried, as a 401 of the model API.
//   - The token endpoint failed (5xx, 408, 429): its status and the OAuth
//     error code — transient, retried after backoff.
//   - The request failed (refused, reset, timed out): no status, the
//     transport's wording — transient as any transport failure.
//
// The message quotes the endpoint's error code and description (at most
// 300 bytes of it), never its body otherwise, and never a token or key:
// the caller redacts the credential's secret from it as from every error.
func Failure(what string, err error) (string, *provider.Failure) {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.Response == nil {
		return fmt.Sprintf("%s: fetching an access token: %v", what, err), &provider.Failure{}
	}
	status := re.Response.StatusCode
	code, desc := re.ErrorCode, re.ErrorDescription
	if code == "" {
		var body struct {
			Error            any    `json:"error"`
			ErrorDescription string `json:"error_description"`
		}
		if json.Unmarshal(re.Body, &body) == nil {
			switch e := body.Error.(type) {
			case string:
				code = e
			case map[string]any: // Google's API envelope on some endpoints
				code, _ = e["status"].(string)
				if m, ok := e["message"].(string); ok && body.ErrorDescription == "" {
					body.ErrorDescription = m
				}
			}
			desc = body.ErrorDescription
		}
	}
	if i := strings.IndexAny(desc, "\r\n"); i >= 0 {
		desc = desc[:i] // Entra ID appends trace and correlation ids
	}
	if len(desc) > 300 {
		desc = desc[:300] + "…"
	}
	text := fmt.Sprintf("%d", status)
	if code != "" {
		text += " " + code
	}
	if desc != "" {
		text += ": " + desc
	}
	if status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500 {
		return fmt.Sprintf("%s: the token endpoint failed: %s", what, text),
			&provider.Failure{Status: status, Code: code, Headers: re.Response.Header.Clone()}
	}
	return fmt.Sprintf("%s: the token endpoint refused the credential: %s", what, text),
		&provider.Failure{Status: http.StatusUnauthorized, Type: "authentication_error", Code: code}
}
