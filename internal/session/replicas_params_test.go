package session_test

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// A session's params are in its stored record: every replica sees them. A
// prompt's own params are in its run: the replica that resumes its retry
// calls with them.
func TestReplicasParams(t *testing.T) {
	srv := redistest.Start(t)
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second)
	rec := &recorder{Provider: sim.New(sim.Options{})}
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, time.Second, func(o *session.Options) {
		o.Providers = []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Models: []string{"echo", "backup"}, Client: rec}}
	})
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo", Params: provider.Params{MaxTokens: 300}})
	if err != nil {
		t.Fatal(err)
	}
	if p := get(t, b.m, s.ID()).State().Params; p.MaxTokens != 300 {
		t.Fatalf("replica B sees params %+v", p)
	}
	follow, err := get(t, b.m, s.ID()).Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer follow.Close()
	_, sub, err := s.PromptWith(t.Context(), "resume me [[faults: 529:retry-after=2,ok]]",
		session.PromptOptions{Params: &provider.Params{Temperature: f64(0.4)}})
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	until(t, follow, session.EventAutoRetryStart)
	a.lose()
	evs := until(t, follow, session.EventPromptEnd)
	if end := evs[len(evs)-1]; end.Outcome != session.OutcomeCompleted {
		t.Fatalf("prompt_end = %+v", end)
	}
	reqs := rec.requests()
	if len(reqs) != 1 || reqs[0].Params.MaxTokens != 300 || reqs[0].Params.Temperature == nil || *reqs[0].Params.Temperature != 0.4 {
		t.Fatalf("B's call had params %+v", reqs)
	}
}
