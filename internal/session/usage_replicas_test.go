package session_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// The session's usage totals are kept with its record: prompts run on two
// replicas add up, and a third replica's GetSession reports their sum, the
// history entries and events (from the stored stream) carrying their parts.
func TestUsageTotalsSurviveReplicas(t *testing.T) {
	ms := replicas(t, 3, retry.DefaultSettings())
	s, err := ms[0].Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	var want provider.Usage
	for i, text := range []string{"one two three", "four five"} {
		sb := get(t, ms[i], s.ID())
		_, sub, err := sb.Prompt(t.Context(), text)
		if err != nil {
			t.Fatal(err)
		}
		end := last(until(t, sub, session.EventPromptEnd))
		sub.Close()
		if end.Usage == nil || end.Usage.IsZero() {
			t.Fatalf("prompt %d: prompt_end usage %v", i, end.Usage)
		}
		want.Add(*end.Usage)
	}
	st := get(t, ms[2], s.ID()).State()
	if st.Usage != want {
		t.Errorf("GetSession on a third replica: usage %+v, want %+v", st.Usage, want)
	}
	entries, _, err := get(t, ms[2], s.ID()).Messages(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var fromHistory provider.Usage
	for _, e := range entries {
		if e.Usage != nil {
			fromHistory.Add(*e.Usage)
		}
	}
	if fromHistory != want {
		t.Errorf("history entries add up to %+v, want %+v", fromHistory, want)
	}
	sub, err := get(t, ms[2], s.ID()).Subscribe(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	until(t, sub, session.EventPromptEnd)
	if end := last(until(t, sub, session.EventPromptEnd)); end.Usage == nil || end.RetryUsage == nil {
		t.Errorf("stored prompt_end lost its usage: %+v", end)
	}
}

// The credential a session keeps is kept with its record: a prompt on
// another replica goes on with it (and so on its prompt cache), although
// that replica's rotation would pick another.
func TestStickyCredentialAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	store := credstore.NewMemory(credstore.MemoryOptions{}) // one store the replicas share, as Redis would be
	for _, c := range trio() {
		c.Provider = "sim"
		if _, err := store.Add(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	withCreds := func(o *session.Options) { o.Credentials = store }
	a := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, 5*time.Second, withCreds)
	b := newReplica(t, srv.Addr(), retry.DefaultSettings(), sim.Options{}, 5*time.Second, withCreds)
	s, err := a.m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for i, m := range []*session.Manager{a.m, b.m, a.m, b.m} {
		// Another session's first call moves the shared rotation on.
		other, err := m.Create(t.Context(), "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		for _, sess := range []*session.Session{get(t, m, s.ID()), other} {
			_, sub, err := sess.Prompt(t.Context(), fmt.Sprintf("turn %d", i))
			if err != nil {
				t.Fatal(err)
			}
			evs := until(t, sub, session.EventPromptEnd)
			sub.Close()
			if sess.ID() == s.ID() {
				used = append(used, only(evs, session.EventMessageStart)[0].Credential)
			}
		}
	}
	for _, id := range used {
		if id != used[0] {
			t.Fatalf("the session's prompts on two replicas used %v: want one credential", used)
		}
	}
}
