package openai

import (
	"bytes"
	"encoding/json"
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

const (
	entraTenant       = "72f988bf-86f1-41af-91ab-2d7cd011db47"
	entraClientID     = "00000000-0000-0000-0000-00000000c11e"
	entraClientSecret = "Xq8Q~FAKEclientSECRETvalue.abcdefghijklmn"
	entraSecret       = entraTenant + ":" + entraClientID + ":" + entraClientSecret
)

// entraEnv is an Entra ID token endpoint, an Azure fake taking only its
// tokens, and a client's options for both.
type entraEnv struct {
	tokens *providertest.TokenServer
	api    *providertest.Server
	clock  atomic.Int64 // seconds ahead of the real clock
	opts   Options
}

func newEntraEnv(t *testing.T, api string) *entraEnv {
	e := &entraEnv{tokens: providertest.NewTokenServer(providertest.TokenOptions{
		ClientID: entraClientID, ClientSecret: entraClientSecret, Scope: EntraScope})}
	t.Cleanup(e.tokens.Close)
	e.api = newServer(t, providertest.Options{Authorize: e.tokens.Valid})
	e.opts = Options{Azure: true, API: api, EntraID: true, BaseURL: e.api.URL, TokenURL: e.tokens.URL + "/{tenant}/oauth2/v2.0/token",
		Now: func() time.Time { return time.Now().Add(time.Duration(e.clock.Load()) * time.Second) }}
	return e
}

func entraRequest() *provider.Request {
	r := request()
	r.Model = "gpt-4o-prod"
	r.Credential = provider.Credential{ID: "sp1", Secret: entraSecret}
	return r
}

func (e *entraEnv) check(t *testing.T, res provider.Result) {
	t.Helper()
	providertest.CheckNoSecret(t, res, entraClientSecret)
	for _, r := range e.tokens.Requests() {
		if r.Token != "" {
			providertest.CheckNoSecret(t, res, r.Token)
		}
	}
}

func classifyResult(res provider.Result) retry.Verdict {
	f := retry.Failure{StopReason: res.Message.StopReason, ErrorMessage: res.Message.ErrorMessage, API: provider.KindAzureOpenAI}
	if res.Failure != nil {
		f.Status, f.Headers, f.ErrorType, f.ErrorCode, f.Body = res.Failure.Status, res.Failure.Headers, res.Failure.Type, res.Failure.Code, res.Failure.Body
	}
	return retry.Classify(f, time.Now())
}

// With Entra ID, concurrent calls share one client-credentials token of
// the tenant's endpoint, sent as a bearer token (no api-key), on Chat
// Completions and on the Responses API alike.
func TestAzureEntraIDToken(t *testing.T) {
	for _, api := range []string{APIChat, APIResponses} {
		t.Run(api, func(t *testing.T) {
			e := newEntraEnv(t, api)
			c := newClient(t, e.opts)
			const n = 6
			results := make([]provider.Result, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { results[i] = c.Stream(testkit.Context(t), entraRequest(), nil) })
			}
			wg.Wait()
			for _, res := range results {
				e.check(t, res)
				if res.Failure != nil || res.Message.StopReason != provider.StopEnd {
					t.Fatalf("result: %+v", res)
				}
			}
			treqs := e.tokens.Requests()
			if len(treqs) != 1 {
				t.Fatalf("%d token requests, want 1", len(treqs))
			}
			tr := treqs[0]
			if tr.Refused != "" || tr.Path != "/"+entraTenant+"/oauth2/v2.0/token" || tr.Grant != providertest.GrantClientCredentials ||
				tr.Form.Get("client_id") != entraClientID || tr.Form.Get("scope") != EntraScope {
				t.Fatalf("token request: %+v", tr)
			}
			for _, r := range e.api.Requests() {
				if r.Header.Get("Authorization") != "Bearer "+providertest.TokenN(1) || r.Header.Get("api-key") != "" {
					t.Fatalf("headers: %v", r.Header)
				}
			}
		})
	}
}

// A token is refreshed when it comes within oauth.ExpiryMargin of its
// expiry on the injected clock; one the resource refuses (401) fails the
// call, not retried, and is dropped, so the next call fetches another.
func TestAzureEntraIDRefresh(t *testing.T) {
	e := newEntraEnv(t, APIChat)
	c := newClient(t, e.opts)
	call := func() provider.Result {
		res := c.Stream(testkit.Context(t), entraRequest(), nil)
		e.check(t, res)
		return res
	}
	call()
	call()
	e.clock.Store(3599 - 30)
	call()
	if n := len(e.tokens.Requests()); n != 2 {
		t.Fatalf("%d token requests, want 2", n)
	}
	e.clock.Store(0)
	e.tokens.Expire()
	res := call()
	if res.Failure == nil || res.Failure.Status != 401 || !strings.Contains(res.Message.ErrorMessage, "Access token is missing, invalid") {
		t.Fatalf("refused token: %+v", res)
	}
	if v := classifyResult(res); v.Class != retry.ClassNotRetryable {
		t.Fatalf("class %v", v.Class)
	}
	if res := call(); res.Failure != nil {
		t.Fatalf("after the refusal: %+v", res)
	}
	var auth []string
	for _, r := range e.api.Requests() {
		auth = append(auth, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	}
	want := []string{providertest.TokenN(1), providertest.TokenN(1), providertest.TokenN(2), providertest.TokenN(2), providertest.TokenN(3)}
	if strings.Join(auth, ",") != strings.Join(want, ",") {
		t.Fatalf("tokens used %v, want %v", auth, want)
	}
}

// Entra ID's refusal of the client secret is an authentication failure
// (not retried) quoting its AADSTS code but none of its trace ids; its 503
// and an unreachable endpoint are transient; a secret that is not client
// credentials fails at once. No model call is made.
func TestAzureEntraIDFailures(t *testing.T) {
	cases := []struct {
		name, secret string
		step         *providertest.TokenStep
		closed       bool
		status       int
		msg          string
		class        retry.Class
	}{
		{"wrong client secret", entraTenant + ":" + entraClientID + ":wrong-secret-value-1234", nil, false, 401,
			"azure-openai: credential sp1: the token endpoint refused the credential: 401 invalid_client: AADSTS7000215: Invalid client secret provided.", retry.ClassNotRetryable},
		{"token endpoint 503", entraSecret, &providertest.TokenStep{Status: 503, Body: `{"error":"temporarily_unavailable","error_description":"AADSTS50196: The server terminated an operation because it encountered a client request loop."}`},
			false, 503, "the token endpoint failed: 503 temporarily_unavailable", retry.ClassTransient},
		{"unreachable", entraSecret, nil, true, 0, "connection refused", retry.ClassTransient},
		{"not client credentials", "justonesecretvalue", nil, false, 401, "with Entra ID a secret is TENANT_ID:CLIENT_ID:CLIENT_SECRET", retry.ClassNotRetryable},
		{"bad tenant", "../evil:" + entraClientID + ":" + entraClientSecret, nil, false, 401, `"../evil" is not a tenant id or domain`, retry.ClassNotRetryable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEntraEnv(t, APIChat)
			c := newClient(t, e.opts)
			if tc.step != nil {
				e.tokens.Enqueue(*tc.step)
			}
			if tc.closed {
				e.tokens.Close()
			}
			req := entraRequest()
			req.Credential.Secret = tc.secret
			res := c.Stream(testkit.Context(t), req, nil)
			e.check(t, res)
			providertest.CheckNoSecret(t, res, tc.secret[strings.LastIndex(tc.secret, ":")+1:])
			if res.Failure == nil || res.Failure.Status != tc.status || !strings.Contains(res.Message.ErrorMessage, tc.msg) ||
				strings.Contains(res.Message.ErrorMessage, "Trace ID") {
				t.Fatalf("result: %+v (%q)", res, res.Message.ErrorMessage)
			}
			if v := classifyResult(res); v.Class != tc.class {
				t.Fatalf("class %v, want %v (%s)", v.Class, tc.class, v.Reason)
			}
			if n := len(e.api.Requests()); n != 0 {
				t.Fatalf("%d model calls", n)
			}
		})
	}
}

// Azure's Responses API: POST {resource}/openai/responses?api-version=…
// with the deployment as the body's model and the key in api-key; no
// prompt_cache_key.
func TestAzureResponsesAPI(t *testing.T) {
	s := newServer(t, providertest.Options{APIKey: secret})
	s.Enqueue(providertest.Step{Answer: &providertest.Answer{Text: []string{"Hello", " Azure"}, InputTokens: 9, OutputTokens: 2}})
	c := newClient(t, Options{Azure: true, API: APIResponses, BaseURL: s.URL})
	req := request()
	req.Model = "gpt-4o-prod"
	res, _ := streamT(t, c, req)
	if res.Failure != nil || res.Message.Text() != "Hello Azure" || res.Usage != (provider.Usage{InputTokens: 9, OutputTokens: 2}) {
		t.Fatalf("result: %+v", res)
	}
	r := s.Requests()[0]
	var body struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(r.Body, &body)
	if r.Path != "/openai/responses" || r.Query != "api-version="+DefaultAzureResponsesAPIVersion || r.Kind != provider.KindOpenAIResponses ||
		body.Model != "gpt-4o-prod" || r.Header.Get("api-key") != secret || r.Header.Get("Authorization") != "" ||
		bytes.Contains(r.Body, []byte("prompt_cache_key")) {
		t.Fatalf("request %s?%s %v %s", r.Path, r.Query, r.Header, r.Body)
	}
	if got, want := c.URL(), s.URL+"/openai/responses?api-version=2025-04-01-preview"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	// A wrong key gets Azure's 401; no api-version Azure's 404.
	s.Enqueue()
	req.Credential.Secret = "sk-wrongFAKEkeyabcdefghijkl"
	if res := c.Stream(testkit.Context(t), req, nil); res.Failure == nil || res.Failure.Status != 401 {
		t.Fatalf("wrong key: %+v", res)
	}
	if got := azureResponsesURL("https://gw.example/azure/?team=a", "2025-03-01-preview"); got != "https://gw.example/azure/openai/responses?api-version=2025-03-01-preview&team=a" {
		t.Errorf("azureResponsesURL = %s", got)
	}
}
