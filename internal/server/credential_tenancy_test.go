package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/testkit"
)

// Tokens of the credential tenancy tests: two tenants and an admin.
const (
	tokenA     = "token-of-team-a-0123456789"
	tokenB     = "token-of-team-b-0123456789"
	tokenAdmin = "token-of-the-admin-0123456789"
)

// The keys the fake Anthropic accepts; anything else is its 401.
const (
	keyMain   = "sk-ant-server-main-0123456789SECRET"     // the configuration file's (a server credential)
	keyA      = "sk-ant-team-a-own-0123456789SECRET"      // team-a's own
	keyShared = "sk-ant-admin-shared-0123456789SECRET"    // one an admin adds (a server credential)
	keyBogus  = "bogus-team-b-key-0123456789SECRET"       // team-b's, which the provider refuses
	keyB2     = "sk-ant-team-b-namesake-0123456789SECRET" // team-b's own, with the ID of team-a's
)

var keyNames = map[string]string{keyMain: "main", keyA: "a-own", keyShared: "shared", keyBogus: "evil", keyB2: "b-namesake"}

// credFace is one face of the CredentialService: gRPC or REST (the HTTP
// gateway). Each call is made with a bearer token and returns the status
// code it got.
type credFace interface {
	create(t *testing.T, token, id, secret string) (*agentdv1.Credential, codes.Code)
	list(t *testing.T, token string) []*agentdv1.Credential
	del(t *testing.T, token, id string) codes.Code
}

type grpcFace struct{ ts *testServer }

func asToken(t *testing.T, token string) context.Context {
	return metadata.AppendToOutgoingContext(testkit.Context(t), "authorization", "Bearer "+token)
}

func (f grpcFace) create(t *testing.T, token, id, secret string) (*agentdv1.Credential, codes.Code) {
	c, err := f.ts.creds.CreateCredential(asToken(t, token), &agentdv1.CreateCredentialRequest{Provider: "up", Id: id, Secret: secret})
	noSecretIn(t, fmt.Sprint(c, err))
	return c, status.Code(err)
}

func (f grpcFace) list(t *testing.T, token string) []*agentdv1.Credential {
	resp, err := f.ts.creds.ListCredentials(asToken(t, token), &agentdv1.ListCredentialsRequest{})
	if err != nil {
		t.Fatalf("ListCredentials = %v", err)
	}
	noSecretIn(t, fmt.Sprint(resp))
	return resp.GetCredentials()
}

func (f grpcFace) del(t *testing.T, token, id string) codes.Code {
	_, err := f.ts.creds.DeleteCredential(asToken(t, token), &agentdv1.DeleteCredentialRequest{CredentialId: id})
	noSecretIn(t, fmt.Sprint(err))
	return status.Code(err)
}

type restFace struct{ ts *testServer }

// do sends a REST call and returns the body of a 200, or the gRPC code of
// the error body after checking that the HTTP status is that code's (403
// for PERMISSION_DENIED, 404 for NOT_FOUND, 409 for ALREADY_EXISTS).
func (f restFace) do(t *testing.T, token, method, path, body string) ([]byte, codes.Code) {
	t.Helper()
	req, err := http.NewRequestWithContext(testkit.Context(t), method, f.ts.baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	noSecretIn(t, string(b))
	if resp.StatusCode == http.StatusOK {
		return b, codes.OK
	}
	var e struct {
		Code codes.Code `json:"code"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Code == codes.OK {
		t.Fatalf("%s %s = %d %s; want a status body", method, path, resp.StatusCode, b)
	}
	if want := runtime.HTTPStatusFromCode(e.Code); resp.StatusCode != want {
		t.Fatalf("%s %s = %d for %v; want %d", method, path, resp.StatusCode, e.Code, want)
	}
	return nil, e.Code
}

func (f restFace) create(t *testing.T, token, id, secret string) (*agentdv1.Credential, codes.Code) {
	body, _ := json.Marshal(map[string]string{"provider": "up", "id": id, "secret": secret})
	b, code := f.do(t, token, http.MethodPost, "/v1/credentials", string(body))
	if code != codes.OK {
		return nil, code
	}
	var c agentdv1.Credential
	if err := protojson.Unmarshal(b, &c); err != nil {
		t.Fatalf("POST /v1/credentials: %s: %v", b, err)
	}
	return &c, code
}

func (f restFace) list(t *testing.T, token string) []*agentdv1.Credential {
	b, code := f.do(t, token, http.MethodGet, "/v1/credentials", "")
	if code != codes.OK {
		t.Fatalf("GET /v1/credentials = %v", code)
	}
	var resp agentdv1.ListCredentialsResponse
	if err := protojson.Unmarshal(b, &resp); err != nil {
		t.Fatalf("GET /v1/credentials: %s: %v", b, err)
	}
	return resp.GetCredentials()
}

func (f restFace) del(t *testing.T, token, id string) codes.Code {
	_, code := f.do(t, token, http.MethodDelete, "/v1/credentials/"+id, "")
	return code
}

// noSecretIn fails when any of the keys shows in s.
func noSecretIn(t *testing.T, s string) {
	t.Helper()
	if strings.Contains(s, "SECRET") {
		t.Fatalf("a secret shows: %s", s)
	}
}

// shown is a listing as "owner/id" ("-" for a server credential's owner),
// sorted.
func shown(creds []*agentdv1.Credential) string {
	out := make([]string, len(creds))
	for i, c := range creds {
		o := c.GetOwner()
		if o == "" {
			o = "-"
		}
		out[i] = o + "/" + c.GetId() + ":" + c.GetSource() + ":" + c.GetStatus()
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// tenancyEnv is agentd with an Anthropic provider (a local fake speaking
// its wire format) and the three tokens.
type tenancyEnv struct {
	ts   *testServer
	fake *providertest.Server
	// sessions are each token's session on the provider.
	sessions map[string]string
}

func startTenancy(t *testing.T) *tenancyEnv {
	t.Setenv("AGENTD_TEST_SERVER_KEY", keyMain)
	valid := map[string]bool{keyMain: true, keyA: true, keyShared: true, keyB2: true}
	fake := providertest.NewServer(providertest.Options{Script: func(r *providertest.Request) providertest.Step {
		if !valid[r.Header.Get("x-api-key")] {
			return providertest.HTTPError(http.StatusUnauthorized)
		}
		return providertest.Step{}
	}})
	t.Cleanup(fake.Close)
	ts := start(t, fmt.Sprintf(`auth:
  tokens:
    - {token: %q, tenant: team-a}
    - {token: %q, tenant: team-b}
    - {token: %q, tenant: ops, admin: true}
retry: {base_delay_ms: 10}
providers:
  - name: up
    kind: anthropic
    base_url: %s
    credentials: [{id: main, api_key_env: AGENTD_TEST_SERVER_KEY}]
`, tokenA, tokenB, tokenAdmin, fake.URL))
	e := &tenancyEnv{ts: ts, fake: fake, sessions: map[string]string{}}
	for _, tok := range []string{tokenA, tokenB, tokenAdmin} {
		sess, err := ts.agent.CreateSession(asToken(t, tok), &agentdv1.CreateSessionRequest{Model: "up/claude-sonnet-4-5"})
		if err != nil {
			t.Fatal(err)
		}
		e.sessions[tok] = sess.GetId()
	}
	return e
}

// prompt runs one prompt in token's session and returns the names of the
// keys its provider calls carried (as the provider saw them), and its
// outcome. The events never show a key.
func (e *tenancyEnv) prompt(t *testing.T, token string) (keys []string, outcome string) {
	t.Helper()
	ctx := asToken(t, token)
	before := len(e.fake.Requests())
	stream, err := e.ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: e.sessions[token], Text: "hi"})
	if err != nil {
		t.Fatalf("Prompt = %v", err)
	}
	evs := collect(t, stream)
	calls := 0
	for _, ev := range evs {
		noSecretIn(t, fmt.Sprint(ev))
		if ev.GetMessageStart() != nil {
			calls++
		}
	}
	reqs, err := e.fake.WaitRequests(ctx, before+calls)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs[before:] {
		keys = append(keys, keyNames[r.Header.Get("x-api-key")])
	}
	return keys, evs[len(evs)-1].GetPromptEnd().GetOutcome()
}

// promptsOnly runs n prompts of token's and checks that every call
// carried the key named want and completed (or failed, when want is the
// one the provider refuses).
func (e *tenancyEnv) promptsOnly(t *testing.T, token, want string, n int) {
	t.Helper()
	for i := range n {
		keys, outcome := e.prompt(t, token)
		if len(keys) == 0 || slices.ContainsFunc(keys, func(k string) bool { return k != want }) {
			t.Fatalf("prompt %d: the provider saw keys %v; want %s only", i, keys, want)
		}
		if wantOK := want != "evil"; (outcome == "completed") != wantOK {
			t.Fatalf("prompt %d with %s: outcome %q", i, want, outcome)
		}
	}
}

func TestCredentialTenancy(t *testing.T) {
	for _, tc := range []struct {
		name string
		face func(*testServer) credFace
	}{
		{"gRPC", func(ts *testServer) credFace { return grpcFace{ts} }},
		{"REST", func(ts *testServer) credFace { return restFace{ts} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startTenancy(t)
			f := tc.face(e.ts)
			admin := grpcFace{e.ts} // the store's whole state, read the same way on both faces
			state := func() string { return shown(admin.list(t, tokenAdmin)) }
			// refused checks that a refused call changed nothing: every
			// owner's credentials as they were, team-a's prompts on its
			// own key.
			refused := func(what string, got, want codes.Code, before string) {
				t.Helper()
				if got != want {
					t.Fatalf("%s = %v, want %v", what, got, want)
				}
				if after := state(); after != before {
					t.Fatalf("%s changed the credentials:\nbefore %s\nafter  %s", what, before, after)
				}
				e.promptsOnly(t, tokenA, "a-own", 1)
			}

			// Before anyone adds a credential, every tenant's calls carry
			// the configuration's server credential.
			e.promptsOnly(t, tokenA, "main", 1)
			e.promptsOnly(t, tokenB, "main", 1)

			// team-a brings its own key: its calls carry it.
			c, code := f.create(t, tokenA, "a-own", keyA)
			if code != codes.OK || c.GetOwner() != "team-a" || c.GetId() != "a-own" || c.GetSource() != "api" {
				t.Fatalf("team-a's CreateCredential = %v, %v", c, code)
			}
			e.promptsOnly(t, tokenA, "a-own", 3)

			// The regression: team-b's POST of a bogus key is team-b's
			// own. team-a's prompts never carry it (they alternated
			// between the real key and evil, failing with 401).
			c, code = f.create(t, tokenB, "evil", keyBogus)
			if code != codes.OK || c.GetOwner() != "team-b" {
				t.Fatalf("team-b's CreateCredential = %v, %v", c, code)
			}
			e.promptsOnly(t, tokenA, "a-own", 4)
			// team-b's own calls carry its bogus key (first in its pool).
			e.promptsOnly(t, tokenB, "evil", 1)
			// The admin's sessions know neither tenant's key.
			e.promptsOnly(t, tokenAdmin, "main", 2)

			// team-b's DELETE of team-a's key: not found, and the key
			// still works.
			before := state()
			refused("team-b's DELETE of a-own", f.del(t, tokenB, "a-own"), codes.NotFound, before)
			refused("team-b's DELETE of nothing", f.del(t, tokenB, "no-such"), codes.NotFound, before)
			// team-b's DELETE of a server credential: permission denied
			// (REST 403).
			refused("team-b's DELETE of main", f.del(t, tokenB, "main"), codes.PermissionDenied, before)
			// Creating a server credential's ID is refused (team-b sees it).
			_, code = f.create(t, tokenB, "main", "another-key")
			refused("team-b's POST of main", code, codes.AlreadyExists, before)
			// The admin's DELETE of a tenant's key: not a server credential.
			refused("the admin's DELETE of a-own", f.del(t, tokenAdmin, "a-own"), codes.NotFound, before)
			refused("the admin's DELETE of main", f.del(t, tokenAdmin, "main"), codes.FailedPrecondition, before)

			// team-b creating the ID team-a has: no collision, no probe,
			// team-a's untouched; team-b deleting it deletes its own.
			c, code = f.create(t, tokenB, "a-own", keyB2)
			if code != codes.OK || c.GetOwner() != "team-b" {
				t.Fatalf("team-b's CreateCredential(a-own) = %v, %v", c, code)
			}
			e.promptsOnly(t, tokenA, "a-own", 2)
			_, code = f.create(t, tokenA, "a-own", "again")
			refused("team-a's second POST of a-own", code, codes.AlreadyExists, state())
			if code := f.del(t, tokenB, "a-own"); code != codes.OK {
				t.Fatalf("team-b's DELETE of its own a-own = %v", code)
			}
			e.promptsOnly(t, tokenA, "a-own", 1)

			// The admin adds a server credential: every tenant sees it.
			c, code = f.create(t, tokenAdmin, "shared", keyShared)
			if code != codes.OK || c.GetOwner() != "" || c.GetSource() != "api" {
				t.Fatalf("the admin's CreateCredential = %v, %v", c, code)
			}
			if got, want := shown(f.list(t, tokenA)), "-/main:config:available -/shared:api:available team-a/a-own:api:available"; got != want {
				t.Errorf("team-a lists %s, want %s", got, want)
			}
			if got, want := shown(f.list(t, tokenB)), "-/main:config:available -/shared:api:available team-b/evil:api:available"; got != want {
				t.Errorf("team-b lists %s, want %s", got, want)
			}
			if got, want := shown(f.list(t, tokenAdmin)), "-/main:config:available -/shared:api:available team-a/a-own:api:available team-b/evil:api:available"; got != want {
				t.Errorf("the admin lists %s, want %s", got, want)
			}
			before = state()
			refused("team-b's DELETE of shared", f.del(t, tokenB, "shared"), codes.PermissionDenied, before)
			refused("team-a's DELETE of shared", f.del(t, tokenA, "shared"), codes.PermissionDenied, before)

			// team-b drops its bogus key: its pool is the server's.
			if code := f.del(t, tokenB, "evil"); code != codes.OK {
				t.Fatalf("team-b's DELETE of evil = %v", code)
			}
			for range 2 {
				keys, outcome := e.prompt(t, tokenB)
				if len(keys) != 1 || (keys[0] != "main" && keys[0] != "shared") || outcome != "completed" {
					t.Fatalf("team-b's prompt without a key of its own: keys %v, %s", keys, outcome)
				}
			}
			e.promptsOnly(t, tokenA, "a-own", 1)

			// The admin deletes its server credential; team-a deletes its
			// own and falls back to the server's.
			if code := f.del(t, tokenAdmin, "shared"); code != codes.OK {
				t.Fatalf("the admin's DELETE of shared = %v", code)
			}
			if code := f.del(t, tokenA, "a-own"); code != codes.OK {
				t.Fatalf("team-a's DELETE of a-own = %v", code)
			}
			e.promptsOnly(t, tokenA, "main", 1)
			if got, want := shown(f.list(t, tokenAdmin)), "-/main:config:available"; got != want {
				t.Errorf("at the end the admin lists %s, want %s", got, want)
			}
		})
	}
}
