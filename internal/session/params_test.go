package session_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

func f64(v float64) *float64 { return &v }

// paramsManager has sim (simulated, recorded) and a catalog on it: model
// small writes at most 1000 tokens and does not think.
func paramsManager(t *testing.T) (*session.Manager, *recorder) {
	t.Helper()
	no := false
	rec := &recorder{Provider: sim.New(sim.Options{})}
	m := session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "small"},
			Catalog: map[string]provider.ModelInfo{"small": {Name: "small", MaxOutputTokens: 1000, SupportsThinking: &no}},
			Client:  rec}},
		Retry: retry.DefaultSettings(),
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, rec
}

func fieldOf(err error) string {
	var inv *session.InvalidError
	if errors.As(err, &inv) {
		return inv.Field
	}
	return ""
}

func TestCreateChecksParams(t *testing.T) {
	m, _ := paramsManager(t)
	for _, tc := range []struct {
		model string
		p     provider.Params
		field string
	}{
		{"sim/echo", provider.Params{Temperature: f64(2.5)}, "params.temperature"},
		{"sim/echo", provider.Params{TopP: f64(-1)}, "params.top_p"},
		{"sim/echo", provider.Params{MaxTokens: -1}, "params.max_tokens"},
		{"sim/echo", provider.Params{StopSequences: []string{"ok", " "}}, "params.stop_sequences[1]"},
		{"sim/echo", provider.Params{StopSequences: make([]string, 17)}, "params.stop_sequences"},
		{"sim/echo", provider.Params{Thinking: &provider.Thinking{Effort: "extreme"}}, "params.thinking.effort"},
		{"sim/echo", provider.Params{Thinking: &provider.Thinking{Effort: "low", BudgetTokens: 2048}}, "params.thinking"},
		{"sim/small", provider.Params{MaxTokens: 1001}, "params.max_tokens"},
		{"sim/small", provider.Params{Thinking: &provider.Thinking{}}, "params.thinking"},
	} {
		_, err := m.Create(context.Background(), "t", session.CreateParams{Model: tc.model, Params: tc.p})
		if got := fieldOf(err); got != tc.field {
			t.Errorf("Create(%s, %+v) = %v; want an error naming %s", tc.model, tc.p, err, tc.field)
		}
	}
	if m.Count() != 0 {
		t.Fatalf("%d sessions after refused creations", m.Count())
	}
	s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/small", Params: provider.Params{MaxTokens: 1000, Temperature: f64(0.3)}})
	if err != nil {
		t.Fatal(err)
	}
	if p := s.State().Params; p.MaxTokens != 1000 || *p.Temperature != 0.3 {
		t.Fatalf("State().Params = %+v", p)
	}
}

// A prompt's params apply to its calls only; refused ones change nothing.
func TestPromptParamsOverrideOnePrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec := paramsManager(t)
		s, err := m.Create(context.Background(), "t", session.CreateParams{Model: "sim/echo",
			Params: provider.Params{MaxTokens: 500, Temperature: f64(0.2)}})
		if err != nil {
			t.Fatal(err)
		}
		over := &provider.Params{Temperature: f64(0.9), Thinking: &provider.Thinking{Effort: "high"}}
		_, sub, err := s.PromptWith(context.Background(), "first", session.PromptOptions{Params: over})
		if err != nil {
			t.Fatal(err)
		}
		readUntilEnd(t, sub)
		sub.Close()
		prompt(t, m, s, "second")
		reqs := rec.requests()
		if p := reqs[0].Params; p.MaxTokens != 500 || *p.Temperature != 0.9 || p.Thinking == nil || p.Thinking.Effort != "high" {
			t.Errorf("first prompt's params = %+v", p)
		}
		if p := reqs[1].Params; p.MaxTokens != 500 || *p.Temperature != 0.2 || p.Thinking != nil {
			t.Errorf("second prompt's params = %+v", p)
		}
		before := s.State()
		_, _, err = s.PromptWith(context.Background(), "third", session.PromptOptions{Params: &provider.Params{TopP: f64(7)}})
		if fieldOf(err) != "params.top_p" {
			t.Fatalf("PromptWith(top_p 7) = %v", err)
		}
		after := s.State()
		if after.MessageCount != before.MessageCount || after.LastSeq != before.LastSeq || len(rec.requests()) != 2 {
			t.Fatalf("a refused prompt changed the session: %+v → %+v", before, after)
		}
	})
}
