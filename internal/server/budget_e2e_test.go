package server_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// budgetConfig is a provider that always answers 529 (a real Anthropic
// wire format) and a retry budget of 100 tokens: 50 retries of the model,
// fleet-wide, before it refuses.
func budgetConfig(store, base string) string {
	return store + fmt.Sprintf(`retry:
  base_delay_ms: 1
  budget: {max_tokens: 100, token_ratio: 0.1}
limits: {max_concurrent_prompts_per_tenant: 1000}
providers:
  - name: up
    kind: anthropic
    base_url: %s
    models: [claude-x]
    credentials: [{id: main, api_key: sk-ant-storm-0123456789}]
`, base)
}

// storm prompts one new session per entry of servers at once and returns
// the prompt_end of each.
func storm(t *testing.T, servers []*testServer) []*agentdv1.PromptEnd {
	ctx := testkit.Context(t)
	ends := make([]*agentdv1.PromptEnd, len(servers))
	// The sessions first (their creation is not the point), then every
	// prompt at once.
	ids := make([]string, len(servers))
	for i, ts := range servers {
		ids[i] = must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "up/claude-x"})).GetId()
	}
	var wg sync.WaitGroup
	for i, ts := range servers {
		wg.Go(func() {
			stream, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: ids[i], Text: "hi"})
			if err != nil {
				t.Error(err)
				return
			}
			for {
				e, err := stream.Recv()
				if err != nil {
					t.Errorf("session %d: stream ended without prompt_end: %v", i, err)
					return
				}
				if pe := e.GetPromptEnd(); pe != nil {
					ends[i] = pe
					return
				}
			}
		})
	}
	wg.Wait()
	return ends
}

// checkStorm: every prompt ended (failed), nearly all on the budget's
// refusal, and the provider saw one call per prompt plus the 50 retries
// the budget allows — not 11 per prompt.
func checkStorm(t *testing.T, ends []*agentdv1.PromptEnd, fake *providertest.Server) {
	t.Helper()
	refused := 0
	for i, pe := range ends {
		if pe == nil {
			t.Fatalf("prompt %d did not end", i)
		}
		if pe.GetOutcome() != "failed" {
			t.Fatalf("prompt %d: %v", i, pe)
		}
		if strings.HasPrefix(pe.GetError(), "retry budget exhausted for up/claude-x (transient). Original error: ") {
			refused++
		}
	}
	if refused < len(ends)-5 {
		t.Fatalf("%d of %d prompts ended on the budget", refused, len(ends))
	}
	if n := len(fake.Requests()); n != len(ends)+50 {
		t.Fatalf("upstream saw %d calls, want %d (one per prompt, 50 retries)", n, len(ends)+50)
	}
}

// metricValue sums a metric's series whose line contains match.
func metricValue(t *testing.T, base, name, match string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, match) {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			sum += v
		}
	}
	return sum
}

// 500 sessions at once against an always-529 provider, with a budget.
func TestRetryBudgetStorm(t *testing.T) {
	fake := providertest.NewServer(providertest.Options{Script: func(*providertest.Request) providertest.Step {
		return providertest.HTTPError(529)
	}})
	t.Cleanup(fake.Close)
	ts := start(t, budgetConfig("", fake.URL))
	servers := make([]*testServer, 500)
	for i := range servers {
		servers[i] = ts
	}
	ends := storm(t, servers)
	checkStorm(t, ends, fake)
	if v := metricValue(t, ts.baseURL, "agentd_retry_budget_tokens", `model="up/claude-x"`); v != 50 {
		t.Fatalf("agentd_retry_budget_tokens = %v, want 50", v)
	}
	refusals := metricValue(t, ts.baseURL, "agentd_retry_budget_refusals_total", `model="up/claude-x"`)
	chains := metricValue(t, ts.baseURL, "agentd_retry_chains_ended_total", `outcome="budget_exhausted"`)
	if refusals < 495 || refusals != chains {
		t.Fatalf("refusals %v, chains ended on the budget %v", refusals, chains)
	}
}

// The same storm on three replicas sharing one Redis: the budget is the
// fleet's, so the provider still sees 50 retries in all.
func TestRetryBudgetStormSharedByReplicas(t *testing.T) {
	rs := redistest.Start(t)
	fake := providertest.NewServer(providertest.Options{Script: func(*providertest.Request) providertest.Step {
		return providertest.HTTPError(529)
	}})
	t.Cleanup(fake.Close)
	// A loaded machine (2 cores, -race) must not turn the storm into
	// store timeouts.
	store := fmt.Sprintf("store:\n  backend: redis\n  redis: {addr: %q, timeout_ms: 10000}\n", rs.Addr())
	replicas := []*testServer{start(t, budgetConfig(store, fake.URL)), start(t, budgetConfig(store, fake.URL)), start(t, budgetConfig(store, fake.URL))}
	servers := make([]*testServer, 300)
	for i := range servers {
		servers[i] = replicas[i%3]
	}
	ends := storm(t, servers)
	checkStorm(t, ends, fake)
	for i, r := range replicas {
		if v := metricValue(t, r.baseURL, "agentd_retry_budget_tokens", `model="up/claude-x"`); v != 50 {
			t.Fatalf("replica %d: agentd_retry_budget_tokens = %v, want 50", i, v)
		}
	}
}
