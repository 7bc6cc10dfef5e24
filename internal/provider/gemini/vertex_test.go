package gemini

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/testkit"
)

const vertexProject = "proj-a"

// vertexEnv is a token server, a Gemini fake that takes only the tokens
// it issued, and a Vertex client of both.
type vertexEnv struct {
	tokens *providertest.TokenServer
	api    *providertest.Server
	key    string
	now    atomic.Int64 // offset of the client's clock from the real one, in seconds
	opts   VertexOptions
}

func newVertexEnv(t *testing.T) *vertexEnv {
	e := &vertexEnv{tokens: providertest.NewTokenServer(providertest.TokenOptions{})}
	t.Cleanup(e.tokens.Close)
	e.api = newServer(t, providertest.Options{Authorize: e.tokens.Valid,
		Answer: &providertest.Answer{Text: []string{"Hello", " from Vertex"}, InputTokens: 8, OutputTokens: 3}})
	e.key = e.tokens.ServiceAccountKey(vertexProject)
	e.opts = VertexOptions{Location: "us-central1", TokenURL: e.tokens.TokenURL(),
		Now: func() time.Time { return time.Now().Add(time.Duration(e.now.Load()) * time.Second) }}
	return e
}

func (e *vertexEnv) client(t *testing.T) *Client {
	opts := e.opts
	return newClient(t, Options{BaseURL: e.api.URL + "/v1", Vertex: &opts})
}

func vertexRequest(key string) *provider.Request {
	r := request()
	r.Credential = provider.Credential{ID: "sa1", Secret: key}
	return r
}

// checkNoKey fails when res carries a piece of the key's private key or of
// any token the server issued.
func (e *vertexEnv) checkNoKey(t *testing.T, res provider.Result) {
	t.Helper()
	pk := e.key[strings.Index(e.key, "-----BEGIN PRIVATE KEY-----"):strings.Index(e.key, "-----END PRIVATE KEY-----")]
	pk = strings.ReplaceAll(strings.TrimPrefix(pk, "-----BEGIN PRIVATE KEY-----"), `\n`, "")
	providertest.CheckNoSecret(t, res, pk)
	for _, r := range e.tokens.Requests() {
		if r.Token != "" {
			providertest.CheckNoSecret(t, res, r.Token)
		}
	}
}

// Calls on Vertex AI go to the project's and location's publisher model
// with the service account's access token, fetched once with a JWT
// bearer grant and shared by concurrent calls.
func TestVertexStreamsWithOneCachedToken(t *testing.T) {
	e := newVertexEnv(t)
	c := e.client(t)
	const n = 8
	results := make([]provider.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = c.Stream(testkit.Context(t), vertexRequest(e.key), nil) })
	}
	wg.Wait()
	for _, res := range results {
		e.checkNoKey(t, res)
		if res.Message.StopReason != provider.StopEnd || res.Message.Text() != "Hello from Vertex" || res.Failure != nil {
			t.Fatalf("result: %+v", res)
		}
	}
	treqs := e.tokens.Requests()
	if len(treqs) != 1 {
		t.Fatalf("%d token requests, want 1: %+v", len(treqs), treqs)
	}
	tr := treqs[0]
	if tr.Refused != "" || tr.Grant != providertest.GrantJWTBearer || tr.Claims["iss"] != e.tokens.Email(vertexProject) ||
		tr.Claims["scope"] != VertexScope || tr.Claims["aud"] != e.tokens.TokenURL() || tr.Path != "/token" {
		t.Fatalf("token request: %+v", tr)
	}
	reqs := e.api.Requests()
	if len(reqs) != n {
		t.Fatalf("%d model requests", len(reqs))
	}
	for _, r := range reqs {
		if r.Path != "/v1/projects/proj-a/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent" ||
			r.Query != "alt=sse" || r.Header.Get("Authorization") != "Bearer "+providertest.TokenN(1) ||
			r.Header.Get("x-goog-api-key") != "" || r.Model != model {
			t.Fatalf("model request: %s?%s %v", r.Path, r.Query, r.Header)
		}
	}
}

// A token is refreshed when it expires (within oauth.ExpiryMargin), read on
// the injected clock; a short-lived one at the next call.
func TestVertexTokenRefresh(t *testing.T) {
	e := newVertexEnv(t)
	c := e.client(t)
	stream := func() provider.Result {
		t.Helper()
		res := c.Stream(testkit.Context(t), vertexRequest(e.key), nil)
		e.checkNoKey(t, res)
		if res.Failure != nil {
			t.Fatalf("result: %+v", res)
		}
		return res
	}
	e.tokens.Enqueue(providertest.TokenStep{ExpiresIn: 20})
	stream() // token 1 lives 20 s: shorter than the margin
	stream() // so this call fetches token 2 (an hour)
	stream() // and this one uses it
	if n := len(e.tokens.Requests()); n != 2 {
		t.Fatalf("%d token requests after three calls, want 2", n)
	}
	e.now.Store(3599 - 30) // 30 s before token 2's expiry: past the margin
	stream()               // fetches token 3
	if n := len(e.tokens.Requests()); n != 3 {
		t.Fatalf("%d token requests, want 3", n)
	}
	var auth []string
	for _, r := range e.api.Requests() {
		auth = append(auth, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	}
	want := []string{providertest.TokenN(1), providertest.TokenN(2), providertest.TokenN(2), providertest.TokenN(3)}
	if strings.Join(auth, ",") != strings.Join(want, ",") {
		t.Fatalf("tokens used: %v, want %v", auth, want)
	}
}

// A token the model API refuses (revoked) fails that call with Vertex's
// 401, not retried, and is dropped: the next call fetches a new one.
func TestVertexRefusedTokenIsDropped(t *testing.T) {
	e := newVertexEnv(t)
	c := e.client(t)
	if res := c.Stream(testkit.Context(t), vertexRequest(e.key), nil); res.Failure != nil {
		t.Fatalf("result: %+v", res)
	}
	e.tokens.Expire()
	res := c.Stream(testkit.Context(t), vertexRequest(e.key), nil)
	e.checkNoKey(t, res)
	f := res.Failure
	if f == nil || f.Status != 401 || f.Type != "UNAUTHENTICATED" || !strings.Contains(res.Message.ErrorMessage, "401 UNAUTHENTICATED: Request had invalid authentication credentials") {
		t.Fatalf("result: %+v", res)
	}
	if v := classify(res); v.Class != retry.ClassNotRetryable {
		t.Fatalf("class %v", v.Class)
	}
	if res := c.Stream(testkit.Context(t), vertexRequest(e.key), nil); res.Failure != nil || res.Message.Text() != "Hello from Vertex" {
		t.Fatalf("after refresh: %+v", res)
	}
	if n := len(e.tokens.Requests()); n != 2 {
		t.Fatalf("%d token requests, want 2", n)
	}
}

func classify(res provider.Result) retry.Verdict {
	f := retry.Failure{StopReason: res.Message.StopReason, ErrorMessage: res.Message.ErrorMessage, API: "vertex",
		ObservableOutput: res.Message.HasObservableOutput()}
	if res.Failure != nil {
		f.Status, f.Headers, f.ErrorType, f.ErrorCode, f.Body = res.Failure.Status, res.Failure.Headers, res.Failure.Type, res.Failure.Code, res.Failure.Body
	}
	return retry.Classify(f, time.Now())
}

// A token that cannot be had fails the call before any model request: a
// refused key as an authentication failure (not retried), a failing or
// unreachable token endpoint as transient. Neither the key nor a token is
// in the result.
func TestVertexTokenFailures(t *testing.T) {
	cases := []struct {
		name   string
		step   *providertest.TokenStep
		closed bool
		status int
		msg    string
		class  retry.Class
	}{
		{"invalid_grant", &providertest.TokenStep{Status: 400, Body: providertest.GoogleInvalidGrant}, false, 401,
			"vertex: credential sa1: the token endpoint refused the credential: 400 invalid_grant: Invalid JWT Signature.", retry.ClassNotRetryable},
		{"backend error", &providertest.TokenStep{Status: 503, Body: providertest.GoogleBackendError}, false, 503,
			"vertex: credential sa1: the token endpoint failed: 503 internal_failure: Backend Error", retry.ClassTransient},
		{"unreachable", nil, true, 0, "connection refused", retry.ClassTransient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newVertexEnv(t)
			c := e.client(t)
			if tc.step != nil {
				e.tokens.Enqueue(*tc.step)
			}
			if tc.closed {
				e.tokens.Close()
			}
			res := c.Stream(testkit.Context(t), vertexRequest(e.key), nil)
			e.checkNoKey(t, res)
			if res.Failure == nil || res.Failure.Status != tc.status || !strings.Contains(res.Message.ErrorMessage, tc.msg) || res.Message.StopReason != provider.StopError {
				t.Fatalf("result: %+v (%q)", res, res.Message.ErrorMessage)
			}
			if v := classify(res); v.Class != tc.class {
				t.Fatalf("class %v, want %v (%s)", v.Class, tc.class, v.Reason)
			}
			if n := len(e.api.Requests()); n != 0 {
				t.Fatalf("%d model requests", n)
			}
			if !tc.closed {
				// Not cached: the next call fetches again and succeeds.
				if res := c.Stream(testkit.Context(t), vertexRequest(e.key), nil); res.Failure != nil {
					t.Fatalf("next call: %+v", res)
				}
			}
		})
	}
}

// A secret that is not a usable service-account key, or whose token_uri
// is not Google's when the provider names no token endpoint, fails at
// once, with no request, naming the problem and quoting none of the key.
func TestVertexBadKeys(t *testing.T) {
	e := newVertexEnv(t)
	c := e.client(t)
	cases := []struct{ name, key, secret, msg string }{
		{"not JSON", secret, secret, "not a service-account key (JSON): invalid JSON at byte 1"},
		{"user credentials", `{"type": "authorized_user", "client_id": "x", "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty", "refresh_token": "1//0gLongRefreshTokenValue"}`,
			"d-FL95Q19q7MQmFpd7hHD0Ty 1//0gLongRefreshTokenValue", `the credential's key has type "authorized_user", want "service_account"`},
		{"bad private key", strings.Replace(e.key, "-----BEGIN PRIVATE KEY-----\\n", "-----BEGIN PRIVATE KEY-----\\nAAAA", 1), "", "private_key is neither PKCS #8 nor PKCS #1"},
	}
	for _, tc := range cases {
		res := c.Stream(testkit.Context(t), vertexRequest(tc.key), nil)
		e.checkNoKey(t, res)
		providertest.CheckNoSecret(t, res, tc.secret)
		if res.Failure == nil || res.Failure.Status != 401 || !strings.Contains(res.Message.ErrorMessage, tc.msg) {
			t.Errorf("%s: %+v", tc.name, res)
		}
	}
	// The key's own token_uri (loopback) is refused without token_url.
	opts := e.opts
	opts.TokenURL = ""
	c = newClient(t, Options{BaseURL: e.api.URL, Vertex: &opts})
	res := c.Stream(testkit.Context(t), vertexRequest(e.key), nil)
	if res.Failure == nil || !strings.Contains(res.Message.ErrorMessage, "token_uri \""+e.tokens.TokenURL()+"\" is not Google's") {
		t.Errorf("loopback token_uri: %+v", res)
	}
	if n, m := len(e.tokens.Requests()), len(e.api.Requests()); n+m != 0 {
		t.Errorf("%d token and %d model requests", n, m)
	}
}

// A provider without credentials uses the application default
// credentials (here GOOGLE_APPLICATION_CREDENTIALS naming a key file),
// with the project they name.
func TestVertexApplicationDefaultCredentials(t *testing.T) {
	e := newVertexEnv(t)
	file := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(file, []byte(e.tokens.ServiceAccountKey("proj-adc")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	opts := e.opts
	opts.TokenURL = "" // the file's own token_uri: the file is the operator's
	c := newClient(t, Options{BaseURL: e.api.URL, Vertex: &opts})
	req := request()
	req.Credential = provider.Credential{}
	for range 2 {
		if res := c.Stream(testkit.Context(t), req, nil); res.Failure != nil || res.Message.Text() != "Hello from Vertex" {
			t.Fatalf("result: %+v", res)
		}
	}
	if n := len(e.tokens.Requests()); n != 1 {
		t.Fatalf("%d token requests", n)
	}
	if p := e.api.Requests()[0].Path; p != "/v1/projects/proj-adc/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent" {
		t.Fatalf("path %s", p)
	}
}

// The configured project wins over the key's; the default endpoints are
// the location's, or the global one.
func TestVertexURL(t *testing.T) {
	c := New(Options{Vertex: &VertexOptions{Project: "p1", Location: "europe-west4"}})
	if got := c.URL("gemini-2.5-pro"); got != "https://europe-west4-aiplatform.googleapis.com/v1/projects/p1/locations/europe-west4/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse" {
		t.Errorf("regional: %s", got)
	}
	c = New(Options{Vertex: &VertexOptions{}})
	if got := c.URL("models/gemini-2.5-pro"); got != "https://aiplatform.googleapis.com/v1/projects/{project}/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse" {
		t.Errorf("global: %s", got)
	}
	c = New(Options{BaseURL: "https://gw.example/vertex/v1beta1/", Vertex: &VertexOptions{Project: "p"}})
	if got := c.URL("m"); got != "https://gw.example/vertex/v1beta1/projects/p/locations/global/publishers/google/models/m:streamGenerateContent?alt=sse" {
		t.Errorf("base_url: %s", got)
	}
	e := newVertexEnv(t)
	e.opts.Project = "proj-config"
	res := e.client(t).Stream(testkit.Context(t), vertexRequest(e.key), nil)
	if res.Failure != nil || !strings.Contains(e.api.Requests()[0].Path, "/projects/proj-config/") {
		t.Fatalf("configured project: %+v", res)
	}
}
