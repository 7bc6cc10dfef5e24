package agentdtest_test

import (
	"fmt"
	"net/http"
	"testing"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// No goroutine of agentd outlives its test.
func TestMain(m *testing.M) {
	redistest.VerifyTestMain(m)
}

// One session through each face: created over gRPC, prompted over REST as
// SSE, its history read as JSON, against the fake provider.
func TestStartFaces(t *testing.T) {
	fake := agentdtest.FakeProvider(t, providertest.Options{})
	a := agentdtest.Start(t, fmt.Sprintf("providers: [{name: up, kind: anthropic, base_url: %s, "+
		"credentials: [{id: k1, api_key: sk-ant-harness-0123456789}]}]\n", fake.URL))
	ctx := testkit.Context(t)
	sess, err := a.Agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "up/claude-sonnet-4-5"})
	if err != nil {
		t.Fatal(err)
	}
	frames := a.SSE(ctx, t, "POST", "/v1/sessions/"+sess.GetId()+":prompt", `{"text":"hi"}`, nil)
	if len(frames) == 0 || frames[len(frames)-1].Event != "prompt_end" {
		t.Fatalf("the prompt's SSE frames end with %v, want prompt_end", frames)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Fatalf("%d model calls, want 1", n)
	}
	var got map[string]any
	if code := a.JSON(ctx, t, "GET", "/v1/sessions/"+sess.GetId(), "", &got); code != http.StatusOK || got["id"] != sess.GetId() {
		t.Fatalf("GET the session: %d %v", code, got)
	}
}

// WithRedis stores in a redis-server of the test's own.
func TestStartWithRedis(t *testing.T) {
	a := agentdtest.Start(t, "", agentdtest.WithRedis("harness:"))
	ctx := testkit.Context(t)
	if _, err := a.Agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"}); err != nil {
		t.Fatal(err)
	}
	keys, err := redistest.Client(t, a.Redis.Addr()).Keys(ctx, "harness:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("no key under harness: in Redis (%v)", err)
	}
}
