package session_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// records are logs' JSON records whose msg is msg.
func records(logs *syncBuffer, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// The "retry scheduled" log line gives its delay in milliseconds, the unit
// in the key (it was nanoseconds under "delay"), and names the failed
// call's model and credential; after a fallback to a provider without
// credentials, the next call carries no other provider's credential.
func TestRetryLogLine(t *testing.T) {
	store := credstore.NewMemory(credstore.MemoryOptions{})
	if _, err := store.Add(context.Background(), credstore.Credential{ID: "key-one", Provider: "keyed", Secret: "sk-one-0123456789"}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"sim/backup"}}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{
			{Name: "keyed", Kind: provider.KindSimulated, Client: simValidator{sim.New(sim.Options{})}},
			{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"}, Client: simValidator{sim.New(sim.Options{})}},
		},
		Retry:       settings,
		Credentials: store,
		Cooldowns:   cooldown.NewMemory(nil),
		Rand:        func() float64 { return 1 },
		Logger:      slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "keyed/model"})
	if err != nil {
		t.Fatal(err)
	}
	evs := prompt(t, m, s, "hi [[faults: 503,ok]]")
	if last(evs).Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt: %s", kinds(evs))
	}
	recs := records(&logs, "retry scheduled")
	if len(recs) != 1 {
		t.Fatalf("%d retry lines: %s", len(recs), logs.String())
	}
	r := recs[0]
	if _, ok := r["delay"]; ok {
		t.Errorf("a delay without its unit: %v", r)
	}
	if r["delay_ms"] != float64(0) || r["model"] != "keyed/model" || r["credential"] != "key-one" || r["next_model"] != "sim/backup" {
		t.Errorf("retry line %v: want delay_ms 0 (a fallback), the failed call's model and credential, next_model sim/backup", r)
	}
	starts := only(evs, session.EventMessageStart)
	if got := starts[len(starts)-1]; got.Model != "sim/backup" || got.Credential != "" {
		t.Errorf("the fallback call: model %s, credential %q; want sim/backup with none", got.Model, got.Credential)
	}
}
