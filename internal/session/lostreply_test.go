package session_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// A replica whose Redis connections drop after Redis ran a script (its
// replies lost: go-redis sends the script again on a new connection) runs
// its prompts as if nothing happened: each prompt completes, the history
// holds each message once, and a follower on another replica sees the
// same events in order. Prompt k loses the reply of the k-th script call
// it sends (its start, an event batch, an append to the history, its end,
// each in some prompt).
func TestReplicasThroughLostReplies(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	settings := retry.Settings{Enabled: true, MaxRetries: 3, BaseDelay: time.Millisecond, MaxDelay: time.Second}
	a := newReplica(t, proxy.Addr(), settings, sim.Options{}, 5*time.Second)
	b := newReplica(t, srv.Addr(), settings, sim.Options{}, 5*time.Second)
	s, follow := createFollowed(t, a, b)
	defer follow.Close()

	const prompts = 20 // a prompt sends 15 to 17 script calls
	for k := 1; k <= prompts; k++ {
		proxy.LoseReplyAfter(k-1, "evalsha")
		text := fmt.Sprintf("prompt %d [[faults: 503,ok]] [[tokens: 5]]", k)
		evs := promptToEnd(t, s, text)
		if end := evs[len(evs)-1]; end.Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt %d: prompt_end = %+v", k, end)
		}
		seen := until(t, follow, session.EventPromptEnd)
		if len(seen) != len(evs) {
			t.Fatalf("prompt %d: the follower saw %d events, the runner %d", k, len(seen), len(evs))
		}
		for i := range evs {
			if seen[i].Seq != evs[i].Seq || seen[i].Type != evs[i].Type || seen[i].TextDelta != evs[i].TextDelta {
				t.Fatalf("prompt %d, event %d: follower %+v, runner %+v", k, i, seen[i], evs[i])
			}
		}
		proxy.Disarm() // a prompt that sent fewer calls lost none
	}
	t.Logf("%d of %d prompts lost a reply", proxy.Lost(), prompts)
	if n := proxy.Lost(); n < prompts/2 {
		t.Fatalf("only %d of %d prompts lost a reply", n, prompts)
	}

	for _, r := range []*replicaT{a, b} {
		entries, total, err := get(t, r.m, s.ID()).Messages(t.Context(), 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		// Each prompt: its user message, the failed call's assistant
		// message (stop reason error), the answer.
		if total != 3*prompts {
			t.Fatalf("history holds %d entries for %d prompts, want %d: %+v", total, prompts, 3*prompts, entries)
		}
		for k := 1; k <= prompts; k++ {
			user, failed, answer := entries[3*(k-1)], entries[3*(k-1)+1], entries[3*(k-1)+2]
			if user.Message.Role != provider.RoleUser || user.Message.Text() != fmt.Sprintf("prompt %d [[faults: 503,ok]] [[tokens: 5]]", k) ||
				failed.Message.Role != provider.RoleAssistant || answer.Message.Role != provider.RoleAssistant || answer.Message.StopReason == "error" {
				t.Fatalf("prompt %d's entries: %+v %+v %+v", k, user, failed, answer)
			}
		}
	}
}
