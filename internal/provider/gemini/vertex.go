package gemini

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"golang.org/x/oauth2/jwt"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/oauth"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// VertexScope is the OAuth 2.0 scope of Vertex AI's access tokens.
const VertexScope = "https://www.googleapis.com/auth/cloud-platform"

// DefaultVertexLocation is the location of Vertex requests when
// VertexOptions.Location is empty: the global endpoint, which serves the
// current Gemini models with the highest availability.
const DefaultVertexLocation = "global"

// VertexOptions make a Client call the Gemini API on Vertex AI (provider
// kind "vertex") instead of Google AI.
type VertexOptions struct {
	// Project is the Google Cloud project of every request; empty: the
	// project of the credential (a service-account key's project_id, the
	// application default credentials' project).
	Project string
	// Location is the region ("us-central1", "europe-west4") or "global";
	// empty: DefaultVertexLocation.
	Location string
	// TokenURL, when set, is the token endpoint of every service-account
	// key (its token_uri is ignored). Empty: the key's token_uri, which
	// must then be an https URL on googleapis.com — a key that a tenant
	// uploads must not make agentd post signed assertions elsewhere.
	TokenURL string
	// TokenTimeout bounds one token request; 0: oauth.DefaultTimeout.
	TokenTimeout time.Duration
	// TokenHTTPClient, when set, sends the token requests (redirects are
	// never followed).
	TokenHTTPClient *http.Client
	// Now is the clock token expiries are read with; nil: time.Now.
	Now func() time.Time
}

// vertexAuth is a Vertex client's credentials: one token source per
// service-account key (and one for the application default credentials),
// shared by every call.
type vertexAuth struct {
	opts   VertexOptions
	tokens *oauth.Cache
}

// vertexCredential is what a source knows beside its token: the project
// (from the key, or found with the application default credentials).
type vertexCredential struct {
	project atomic.Pointer[string]
}

func newVertexAuth(opts VertexOptions) *vertexAuth {
	if strings.TrimSpace(opts.Location) == "" {
		opts.Location = DefaultVertexLocation
	}
	return &vertexAuth{opts: opts, tokens: oauth.NewCache(oauth.Options{
		Timeout: opts.TokenTimeout, HTTPClient: opts.TokenHTTPClient, Now: opts.Now,
	})}
}

// vertexBaseURL is the API root of a Vertex client: base (with its version
// path; a URL with none gets "/v1"), else the location's endpoint.
func vertexBaseURL(base, location string) string {
	base = strings.TrimSpace(base)
	if base == "" {
		if location == DefaultVertexLocation {
			return "https://aiplatform.googleapis.com/v1"
		}
		return "https://" + location + "-aiplatform.googleapis.com/v1"
	}
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimRight(base, "/")
	}
	p := strings.TrimRight(u.Path, "/")
	if p == "" {
		p = "/v1"
	}
	u.Path, u.RawPath, u.RawQuery = p, "", ""
	return u.String()
}

// vertexURL is the streamGenerateContent endpoint of model in project.
func (c *Client) vertexURL(project, model string) string {
	m := strings.TrimPrefix(model, "models/")
	return c.base + "/projects/" + url.PathEscape(project) + "/locations/" + url.PathEscape(c.vertex.opts.Location) +
		"/publishers/google/models/" + url.PathEscape(m) + ":streamGenerateContent?alt=sse"
}

// serviceAccountKey is what agentd reads of a service-account key itself
// (google.JWTConfigFromJSON reads the rest).
type serviceAccountKey struct {
	Type      string `json:"type"`
	ProjectID string `json:"project_id"`
	TokenURI  string `json:"token_uri"`
}

// source is the token source of cred: its service-account key's, or the
// application default credentials' when cred has no secret.
func (v *vertexAuth) source(cred provider.Credential) (*oauth.Source, error) {
	if cred.Secret == "" {
		return v.tokens.Source("", func() (oauth.Fetch, any, error) {
			vc := &vertexCredential{}
			return v.adcFetch(vc), vc, nil
		})
	}
	return v.tokens.Source(cred.Secret, func() (oauth.Fetch, any, error) {
		var key serviceAccountKey
		if err := json.Unmarshal([]byte(cred.Secret), &key); err != nil {
			return nil, nil, errors.New("the credential is not a service-account key (JSON): " + jsonErrorText(err))
		}
		if key.Type != "service_account" {
			return nil, nil, fmt.Errorf("the credential's key has type %q, want \"service_account\"", key.Type)
		}
		cfg, err := google.JWTConfigFromJSON([]byte(cred.Secret), VertexScope)
		if err != nil {
			return nil, nil, errors.New("the credential is not a usable service-account key: " + err.Error())
		}
		if err := checkPrivateKey(cfg.PrivateKey); err != nil {
			return nil, nil, err
		}
		switch {
		case v.opts.TokenURL != "":
			cfg.TokenURL = v.opts.TokenURL
		case !googleTokenURL(key.TokenURI):
			return nil, nil, fmt.Errorf("the key's token_uri %q is not Google's (https://oauth2.googleapis.com/token); set the provider's token_url to use another token endpoint", key.TokenURI)
		}
		vc := &vertexCredential{}
		p := key.ProjectID
		vc.project.Store(&p)
		return func(ctx context.Context) (*oauth2.Token, error) { return jwtToken(ctx, cfg) }, vc, nil
	})
}

// jwtToken makes one JWT bearer grant request of cfg, bound to ctx.
func jwtToken(ctx context.Context, cfg *jwt.Config) (*oauth2.Token, error) {
	return cfg.TokenSource(ctx).Token()
}

// adcFetch fetches tokens with the application default credentials,
// looked up on the first fetch (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
// file, the metadata server) and kept once found.
func (v *vertexAuth) adcFetch(vc *vertexCredential) oauth.Fetch {
	var creds *google.Credentials
	return func(ctx context.Context) (*oauth2.Token, error) {
		// Called under the source's lock: creds needs no lock of its own.
		if creds == nil {
			// The credentials' token source keeps the context it was made
			// with: one that ends with this call would break later fetches.
			c, err := google.FindDefaultCredentials(context.WithValue(context.Background(), oauth2.HTTPClient, oauth2ClientOf(ctx)), VertexScope)
			if err != nil {
				return nil, adcError{err}
			}
			creds = c
			p := c.ProjectID
			vc.project.Store(&p)
		}
		return creds.TokenSource.Token()
	}
}

// adcError is a failure to find the application default credentials.
type adcError struct{ err error }

func (e adcError) Error() string { return "application default credentials: " + e.err.Error() }

// oauth2ClientOf is the HTTP client a fetch's ctx carries.
func oauth2ClientOf(ctx context.Context) *http.Client {
	if hc, ok := ctx.Value(oauth2.HTTPClient).(*http.Client); ok {
		return hc
	}
	return http.DefaultClient
}

// checkPrivateKey checks that a key's private_key is an RSA key in PEM
// (PKCS #8 or PKCS #1), so that a broken key fails as such before any
// request and not as a fetch error.
func checkPrivateKey(pemKey []byte) error {
	block, _ := pem.Decode(pemKey)
	if block == nil {
		return errors.New("the key's private_key is not PEM")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if _, ok := k.(*rsa.PrivateKey); ok {
			return nil
		}
		return errors.New("the key's private_key is not an RSA key")
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
		return errors.New("the key's private_key is neither PKCS #8 nor PKCS #1")
	}
	return nil
}

// googleTokenURL reports whether u is a Google token endpoint: https on
// googleapis.com.
func googleTokenURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Scheme != "https" {
		return false
	}
	h := p.Hostname()
	return h == "googleapis.com" || strings.HasSuffix(h, ".googleapis.com")
}

// jsonErrorText is a JSON decoding error without any of the input (a
// syntax error quotes one character at most; a type error names a field).
func jsonErrorText(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	}
	return "invalid JSON"
}

// vertexToken returns the access token, project and token source of a
// call with cred, or the failed result.
func (c *Client) vertexToken(ctx context.Context, req *provider.Request, onDelta func(provider.Delta)) (string, string, *oauth.Source, *provider.Result) {
	v := c.vertex
	fail := func(msg string, f *provider.Failure) *provider.Result {
		r := wire.NewAccSecrets(req.Model, keySecrets(req.Credential.Secret), onDelta).Fail(msg, "", f)
		return &r
	}
	src, err := v.source(req.Credential)
	if err != nil {
		// A key that cannot be used is an authentication failure.
		return "", "", nil, fail(fmt.Sprintf("vertex: credential %s: %v", credName(req.Credential), err),
			&provider.Failure{Status: http.StatusUnauthorized, Type: "authentication_error"})
	}
	tok, err := src.Token(ctx)
	if err != nil {
		if ctx.Err() != nil {
			r := wire.NewAcc(req.Model, req.Credential.Secret, onDelta).Aborted()
			return "", "", nil, &r
		}
		var ae adcError
		if errors.As(err, &ae) {
			return "", "", nil, fail("vertex: "+ae.Error(), &provider.Failure{Status: http.StatusUnauthorized, Type: "authentication_error"})
		}
		msg, f := oauth.Failure("vertex: credential "+credName(req.Credential), err)
		return "", "", nil, fail(msg, f)
	}
	project := v.opts.Project
	if vc, ok := src.Value.(*vertexCredential); ok && project == "" {
		if p := vc.project.Load(); p != nil {
			project = *p
		}
	}
	if project == "" {
		return "", "", nil, fail(fmt.Sprintf("vertex: credential %s: no project: set the provider's project (the credential names none)", credName(req.Credential)),
			&provider.Failure{Status: http.StatusBadRequest, Type: "INVALID_ARGUMENT"})
	}
	return tok.AccessToken, project, src, nil
}

// keySecrets are the parts of a credential's secret to redact from an
// error: the secret fields of a key in JSON (not the whole JSON, whose
// field names and URLs would blot out the words of every message), else
// the whole secret.
func keySecrets(secret string) []string {
	var key map[string]any
	if json.Unmarshal([]byte(secret), &key) != nil {
		return []string{secret}
	}
	var out []string
	for _, f := range []string{"private_key", "private_key_id", "client_secret", "refresh_token"} {
		if v, ok := key[f].(string); ok && v != "" {
			out = append(out, v)
			if f == "private_key" {
				// Its base64 lines too: a quoted piece would lack the PEM
				// armour and newlines.
				out = append(out, strings.Split(v, "\n")...)
			}
		}
	}
	return out
}

// credName names a credential in an error.
func credName(c provider.Credential) string {
	if c.ID == "" {
		return "(application default credentials)"
	}
	return c.ID
}
