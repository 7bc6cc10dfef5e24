package providertest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Token endpoint error bodies, as the endpoints send them (RFC 6749 §5.2
// with each one's own wording).
const (
	// GoogleInvalidGrant is Google's answer to an assertion signed with a
	// key it does not know (a deleted or rotated service-account key).
	GoogleInvalidGrant = `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`
	// GoogleBackendError is a token endpoint's 503.
	GoogleBackendError = `{"error":"internal_failure","error_description":"Backend Error"}`
	// EntraInvalidClient is Entra ID's 401 for a wrong client secret.
	EntraInvalidClient = `{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '00000000-0000-0000-0000-00000000c11e'.\r\nTrace ID: 2b5e1c2a-4f1e-4a55-9a0e-8c3f2f9d0a00\r\nCorrelation ID: 7c0e9c8e-1d3b-4d0f-9b1e-2a6f5f3c2b11\r\nTimestamp: 2025-06-01 10:00:00Z","error_codes":[7000215],"timestamp":"2025-06-01 10:00:00Z","trace_id":"2b5e1c2a-4f1e-4a55-9a0e-8c3f2f9d0a00","correlation_id":"7c0e9c8e-1d3b-4d0f-9b1e-2a6f5f3c2b11","error_uri":"https://login.microsoftonline.com/error?code=7000215"}`
	// VertexUnauthenticated is Vertex AI's 401 for a missing, expired or
	// unknown access token.
	VertexUnauthenticated = `{
  "error": {
    "code": 401,
    "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
    "status": "UNAUTHENTICATED"
  }
}
`
)

// Grant types of the token requests TokenServer answers.
const (
	GrantJWTBearer         = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	GrantClientCredentials = "client_credentials"
)

// TokenOptions configure a TokenServer.
type TokenOptions struct {
	// ExpiresIn is the lifetime of the tokens issued, in seconds (0: 3599,
	// as Google and Entra ID answer).
	ExpiresIn int
	// ClientID and ClientSecret are the client credentials that
	// client-credentials grants must carry (in the form, or with HTTP
	// Basic); Scope the scope they must ask for.
	ClientID, ClientSecret, Scope string
}

// TokenStep is the answer to one token request: a status and body when
// Status is set (an error), else a token valid for ExpiresIn seconds (0:
// the server's).
type TokenStep struct {
	Status    int
	Body      string
	ExpiresIn int
}

// TokenRequest is a token request the server saw.
type TokenRequest struct {
	Path  string
	Grant string
	Form  url.Values
	// Claims are the JWT assertion's claims (jwt-bearer grants).
	Claims map[string]any
	// KeyID is the assertion's "kid" header.
	KeyID string
	// Refused says why the request was refused ("" when it was not).
	Refused string
	// Token is the access token issued ("" when none was).
	Token string
}

// TokenServer is a fake OAuth 2.0 token endpoint on loopback, for the
// provider kinds that authenticate with access tokens: Google's JWT bearer
// grant (RFC 7523) of a service-account key, whose assertion it verifies
// against its own key (see ServiceAccountKey), and the client-credentials
// grant of Microsoft Entra ID. The n-th token it issues (from 1) is
// TokenN(n) and valid (see Valid) until Expire.
type TokenServer struct {
	*httptest.Server
	opts  TokenOptions
	key   *rsa.PrivateKey
	keyID string

	mu     sync.Mutex
	queue  []TokenStep
	reqs   []TokenRequest
	issued int
	valid  map[string]bool
}

var (
	testKeyOnce sync.Once
	testKey     *rsa.PrivateKey
)

// rsaTestKey is the process's service-account key (made once: RSA key
// generation is slow under the race detector).
func rsaTestKey() *rsa.PrivateKey {
	testKeyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		testKey = k
	})
	return testKey
}

// TokenN is the n-th access token a TokenServer issues (n from 1): long
// enough for CheckNoSecret to look for its pieces.
func TokenN(n int) string { return fmt.Sprintf("ya29.fake-access-token-%06d", n) }

// NewTokenServer starts a token server on 127.0.0.1; Close it.
func NewTokenServer(opts TokenOptions) *TokenServer {
	if opts.ExpiresIn == 0 {
		opts.ExpiresIn = 3599
	}
	s := &TokenServer{opts: opts, key: rsaTestKey(), keyID: "0123456789abcdef0123456789abcdef01234567", valid: map[string]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// TokenURL is the server's token endpoint.
func (s *TokenServer) TokenURL() string { return s.URL + "/token" }

// ServiceAccountKey is a service-account key (the JSON a console
// download holds) whose private key the server verifies assertions
// against, for project, with token_uri the server's.
func (s *TokenServer) ServiceAccountKey(project string) string {
	der, err := x509.MarshalPKCS8PrivateKey(s.key)
	if err != nil {
		panic(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	b, _ := json.MarshalIndent(map[string]string{
		"type":                        "service_account",
		"project_id":                  project,
		"private_key_id":              s.keyID,
		"private_key":                 string(pemKey),
		"client_email":                s.Email(project),
		"client_id":                   "104729551012345678901",
		"auth_uri":                    "https://accounts.google.com/o/oauth2/auth",
		"token_uri":                   s.TokenURL(),
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
		"client_x509_cert_url":        "https://www.googleapis.com/robot/v1/metadata/x509/agentd-test%40" + project + ".iam.gserviceaccount.com",
		"universe_domain":             "googleapis.com",
	}, "", "  ")
	return string(b)
}

// Email is the service account's email in project.
func (s *TokenServer) Email(project string) string {
	return "agentd-test@" + project + ".iam.gserviceaccount.com"
}

// Enqueue queues answers for the next token requests.
func (s *TokenServer) Enqueue(steps ...TokenStep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, steps...)
}

// Requests returns the token requests seen so far.
func (s *TokenServer) Requests() []TokenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]TokenRequest(nil), s.reqs...)
}

// Valid reports whether tok is a token the server issued since the last
// Expire (a use for providertest.Options.Authorize).
func (s *TokenServer) Valid(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.valid[tok]
}

// Expire makes every token issued so far invalid (a token revoked or
// expired at the provider).
func (s *TokenServer) Expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.valid = map[string]bool{}
}

func (s *TokenServer) serve(w http.ResponseWriter, r *http.Request) {
	tr := TokenRequest{Path: r.URL.Path}
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		tr.Refused = "not a form POST"
	}
	tr.Form, tr.Grant = r.PostForm, r.PostForm.Get("grant_type")
	status, body := http.StatusBadRequest, ""
	if tr.Refused == "" {
		switch tr.Grant {
		case GrantJWTBearer:
			tr.Refused = s.checkAssertion(r, &tr)
			body = GoogleInvalidGrant
		case GrantClientCredentials:
			tr.Refused = s.checkClient(r)
			status, body = http.StatusUnauthorized, EntraInvalidClient
		default:
			tr.Refused = "unsupported grant_type " + tr.Grant
			body = `{"error":"unsupported_grant_type","error_description":"Invalid grant_type: ` + tr.Grant + `"}`
		}
	}
	s.mu.Lock()
	var step TokenStep
	if len(s.queue) > 0 {
		step, s.queue = s.queue[0], s.queue[1:]
	}
	if tr.Refused == "" && step.Status == 0 {
		s.issued++
		tr.Token = TokenN(s.issued)
		s.valid[tr.Token] = true
	}
	s.reqs = append(s.reqs, tr)
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache, no-store, max-age=0, must-revalidate")
	switch {
	case tr.Refused != "":
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	case step.Status != 0:
		w.WriteHeader(step.Status)
		_, _ = w.Write([]byte(step.Body))
	default:
		exp := step.ExpiresIn
		if exp == 0 {
			exp = s.opts.ExpiresIn
		}
		if tr.Grant == GrantClientCredentials {
			_, _ = fmt.Fprintf(w, `{"token_type":"Bearer","expires_in":%d,"ext_expires_in":%d,"access_token":%q}`, exp, exp, tr.Token)
			return
		}
		_, _ = fmt.Fprintf(w, "{\n  \"access_token\": %q,\n  \"expires_in\": %d,\n  \"token_type\": \"Bearer\"\n}", tr.Token, exp)
	}
}

// checkAssertion verifies a JWT bearer grant's assertion as Google does:
// RS256 signed by the service account's key, issued by its email, for
// this endpoint, with a scope, valid for at most an hour.
func (s *TokenServer) checkAssertion(r *http.Request, tr *TokenRequest) string {
	parts := strings.Split(r.PostForm.Get("assertion"), ".")
	if len(parts) != 3 {
		return "the assertion is not a JWS"
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := decodeSegment(parts[0], &hdr); err != nil {
		return "header: " + err.Error()
	}
	if err := decodeSegment(parts[1], &tr.Claims); err != nil {
		return "claims: " + err.Error()
	}
	tr.KeyID = hdr.Kid
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return "signature: " + err.Error()
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if hdr.Alg != "RS256" || rsa.VerifyPKCS1v15(&s.key.PublicKey, crypto.SHA256, sum[:], sig) != nil {
		return "bad signature"
	}
	iss, _ := tr.Claims["iss"].(string)
	aud, _ := tr.Claims["aud"].(string)
	scope, _ := tr.Claims["scope"].(string)
	iat, _ := tr.Claims["iat"].(float64)
	exp, _ := tr.Claims["exp"].(float64)
	switch {
	case !strings.HasSuffix(iss, ".iam.gserviceaccount.com"):
		return "iss is not a service account"
	case aud != s.URL+r.URL.Path:
		return "aud " + aud + " is not this endpoint"
	case scope == "":
		return "no scope"
	case exp <= iat || time.Duration(exp-iat)*time.Second > time.Hour:
		return "exp must be after iat, within an hour"
	case hdr.Kid != s.keyID:
		return "unknown kid"
	}
	return ""
}

// checkClient checks a client-credentials grant's client and scope.
func (s *TokenServer) checkClient(r *http.Request) string {
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	switch {
	case id != s.opts.ClientID || secret != s.opts.ClientSecret:
		return "wrong client credentials"
	case s.opts.Scope != "" && r.PostForm.Get("scope") != s.opts.Scope:
		return "scope " + r.PostForm.Get("scope") + ", want " + s.opts.Scope
	}
	return ""
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
