package server_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/redistest"
)

// Two replicas on one Redis, the server's key main and team-a's own key:
// once main meets a rate limit of claude-x on replica 2 (team-b's
// session falls back to claude-y), team-b's new session on replica 1
// starts on claude-y (the fleet knows: the server's keys cool), while
// team-a's session, whose calls use its own key, stays on claude-x on
// either replica.
func TestServerKeysRateLimitAcrossReplicas(t *testing.T) {
	t.Setenv("AGENTD_TEST_SERVER_KEY", keyMain)
	var limited atomic.Bool
	fake := providertest.NewServer(providertest.Options{Script: func(r *providertest.Request) providertest.Step {
		if limited.Load() && r.Header.Get("x-api-key") == keyMain && r.Model == "claude-x" {
			return providertest.HTTPError(http.StatusTooManyRequests)
		}
		return providertest.Step{}
	}})
	t.Cleanup(fake.Close)
	rs := redistest.Start(t)
	cfg := fmt.Sprintf(`auth:
  tokens:
    - {token: %q, tenant: team-a}
    - {token: %q, tenant: team-b}
retry: {base_delay_ms: 10, model_fallback: true, fallback_chains: {default: [up/claude-y]}}
store:
  backend: redis
  redis: {addr: %q}
providers:
  - name: up
    kind: anthropic
    base_url: %s
    models: [claude-x, claude-y]
    credentials: [{id: main, api_key_env: AGENTD_TEST_SERVER_KEY}]
`, tokenA, tokenB, rs.Addr(), fake.URL)
	r1, r2 := start(t, cfg), start(t, cfg)
	if _, err := r1.creds.CreateCredential(asToken(t, tokenA), &agentdv1.CreateCredentialRequest{Id: "a-own", Provider: "up", Secret: keyA}); err != nil {
		t.Fatal(err)
	}
	session := func(ts *testServer, token string) string {
		t.Helper()
		s, err := ts.agent.CreateSession(asToken(t, token), &agentdv1.CreateSessionRequest{Model: "up/claude-x"})
		if err != nil {
			t.Fatal(err)
		}
		return s.GetId()
	}
	// prompt runs a prompt and returns the models its calls went to and
	// its model changes' reasons.
	prompt := func(ts *testServer, token, id string) (models, changes []string) {
		t.Helper()
		stream, err := ts.agent.Prompt(asToken(t, token), &agentdv1.PromptRequest{SessionId: id, Text: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, stream)
		for _, ev := range evs {
			if ms := ev.GetMessageStart(); ms != nil {
				models = append(models, ms.GetModel())
			}
			if mc := ev.GetModelChange(); mc != nil {
				changes = append(changes, mc.GetReason()+" to "+mc.GetTo())
			}
		}
		if out := evs[len(evs)-1].GetPromptEnd().GetOutcome(); out != "completed" {
			t.Fatalf("prompt in %s: %s", id, out)
		}
		return models, changes
	}

	a := session(r1, tokenA)
	if models, _ := prompt(r1, tokenA, a); fmt.Sprint(models) != "[up/claude-x]" {
		t.Fatalf("team-a's first prompt went to %v", models)
	}
	limited.Store(true)
	b := session(r2, tokenB)
	if models, changes := prompt(r2, tokenB, b); fmt.Sprint(models) != "[up/claude-x up/claude-y]" || fmt.Sprint(changes) != "[fallback to up/claude-y]" {
		t.Fatalf("team-b's prompt on the limited server key: calls %v, changes %v", models, changes)
	}
	if models, changes := prompt(r1, tokenB, session(r1, tokenB)); fmt.Sprint(models) != "[up/claude-y]" || fmt.Sprint(changes) != "[cooldown to up/claude-y]" {
		t.Fatalf("team-b's new session on the other replica: calls %v, changes %v; want it started on claude-y", models, changes)
	}
	for _, ts := range []*testServer{r1, r2} {
		if models, changes := prompt(ts, tokenA, a); fmt.Sprint(models) != "[up/claude-x]" || len(changes) != 0 {
			t.Fatalf("team-a's session, on its own key: calls %v, changes %v; want claude-x", models, changes)
		}
	}
	keys := map[string]int{}
	for _, r := range fake.Requests() {
		keys[keyNames[r.Header.Get("x-api-key")]+" "+r.Model]++
	}
	if keys["a-own claude-x"] != 3 || keys["main claude-x"] != 1 || keys["main claude-y"] != 2 || len(keys) != 3 {
		t.Fatalf("the provider saw %v", keys)
	}
}
