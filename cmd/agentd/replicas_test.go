package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/redistest"
)

// replica is one `agentd serve` process.
type replica struct {
	http string // base URL
	cmd  *exec.Cmd
	done chan struct{}
}

// buildAgentd builds the agentd binary once per test binary run.
func buildAgentd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agentd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startReplica runs `agentd serve` with cfg on free loopback ports and waits
// until it logs that it serves (see startNode).
func startReplica(t *testing.T, bin, cfg string) *replica {
	t.Helper()
	return startNode(t, bin, "replica", cfg).replica
}

func (r *replica) post(t *testing.T, path, body string) []byte {
	t.Helper()
	resp, err := http.Post(r.http+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s = %d %s", path, resp.StatusCode, b)
	}
	return b
}

func (r *replica) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(r.http + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// prompt creates a session on model and runs text to its end; it returns
// the events (newline-delimited JSON, {"result": event}).
func (r *replica) prompt(t *testing.T, model, text string) []map[string]any {
	t.Helper()
	var sess struct{ ID string }
	if err := json.Unmarshal(r.post(t, "/v1/sessions", `{"model":"`+model+`"}`), &sess); err != nil {
		t.Fatal(err)
	}
	body := r.post(t, "/v1/sessions/"+sess.ID+":prompt", `{"text":"`+text+`"}`)
	var evs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var chunk struct{ Result map[string]any }
		if err := json.Unmarshal([]byte(line), &chunk); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		evs = append(evs, chunk.Result)
	}
	return evs
}

func payloads(evs []map[string]any, typ, field string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e["type"] == typ {
			out = append(out, e[field].(map[string]any))
		}
	}
	return out
}

// Two agentd processes share one Redis: a usage limit replica 1 hits on key
// A blocks it for replica 2 too, whose next prompt goes straight to key B;
// a model replica 1 saw failing cools down for replica 2's fallback chains.
func TestReplicasShareCredentialBlocksAndCooldowns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs agentd processes")
	}
	redis := redistest.Start(t)
	bin := buildAgentd(t)
	cfg := fmt.Sprintf(`store:
  backend: redis
  redis: {addr: %s, key_prefix: "replicas:"}
retry:
  base_delay_ms: 10
  fallback_chains: {default: [sim/echo, sim/backup]}
providers:
  - name: sim
    kind: simulated
    credentials: [{id: key-a, api_key: sk-a-secret}, {id: key-b, api_key: sk-b-secret}]
`, redis.Addr())
	r1 := startReplica(t, bin, cfg)
	r2 := startReplica(t, bin, cfg)

	// Replica 1 hits a usage limit on key A and switches to key B at once.
	evs := r1.prompt(t, "sim/echo", "hi [[faults: usage:retry-after=3600,ok]]")
	sw := payloads(evs, "credential_switched", "credentialSwitched")
	if len(sw) != 1 || sw[0]["from"] != "key-a" || sw[0]["to"] != "key-b" {
		t.Fatalf("replica 1 credential_switched = %v", sw)
	}
	// Replica 2 sees the block…
	var creds struct {
		Credentials []struct{ ID, Status, BlockedUntil string }
	}
	r2.get(t, "/v1/credentials", &creds)
	if len(creds.Credentials) != 2 || creds.Credentials[0].Status != "blocked" || creds.Credentials[1].Status != "available" {
		t.Fatalf("replica 2 credentials = %+v", creds)
	}
	// …and its next prompts go straight to key B.
	for range 3 {
		evs = r2.prompt(t, "sim/echo", "hello")
		ms := payloads(evs, "message_start", "messageStart")
		if len(ms) != 1 || ms[0]["credentialId"] != "key-b" {
			t.Fatalf("replica 2 message_start = %v", ms)
		}
	}

	// Replica 1 sees sim/echo overloaded and falls back to sim/backup; the
	// cooldown it records keeps replica 2 from falling back to sim/echo.
	evs = r1.prompt(t, "sim/echo", "x [[faults: 529,ok]]")
	if fa := payloads(evs, "retry_fallback_applied", "retryFallbackApplied"); len(fa) != 1 || fa[0]["to"] != "sim/backup" {
		t.Fatalf("replica 1 fallback = %v", fa)
	}
	evs = r2.prompt(t, "sim/backup", "y [[faults: 529,ok]]")
	if fa := payloads(evs, "retry_fallback_applied", "retryFallbackApplied"); len(fa) != 0 {
		t.Fatalf("replica 2 fell back to a model cooling down: %v", fa)
	}
	if st := payloads(evs, "auto_retry_start", "autoRetryStart"); len(st) != 1 || st[0]["delaySource"] != "estimate" {
		t.Fatalf("replica 2 auto_retry_start = %v", st)
	}
}
