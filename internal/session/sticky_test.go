package session_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/session"
)

func trio() []credstore.Credential {
	return []credstore.Credential{{ID: "key-a", Secret: "sk-a"}, {ID: "key-b", Secret: "sk-b"}, {ID: "key-c", Secret: "sk-c"}}
}

// A session's prompts stay on the credential it used first, and so on its
// warm prompt cache, until that credential is blocked: then the next call
// takes another and stays on it.
func TestStickyCredential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, store := credManager(t, trio()...)
		s := create(t, m, session.RetryOverrides{})
		for i := range 20 {
			evs := prompt(t, m, s, fmt.Sprintf("turn %d", i))
			if i > 0 {
				if u := only(evs, session.EventMessageEnd)[0].Usage; u.CacheReadTokens == 0 {
					t.Fatalf("turn %d read nothing from the prompt cache: %+v", i, u)
				}
			}
		}
		used := credIDs(rec.requests())
		for i, id := range used {
			if id != used[0] {
				t.Fatalf("call %d used %s, the session started on %s: %v", i, id, used[0], used)
			}
		}
		// Another session starts on the next sibling: load is spread when
		// sessions start.
		s2 := create(t, m, session.RetryOverrides{})
		prompt(t, m, s2, "hello")
		if got := credIDs(rec.requests())[20]; got == used[0] {
			t.Errorf("a second session started on %s too", got)
		}

		// Blocked from outside (another session's usage limit): the next
		// call moves, without an event, and stays.
		if _, err := store.UsageLimited(context.Background(), "", "sim", used[0], time.Hour, true, "test"); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			evs := prompt(t, m, s, fmt.Sprintf("after the block %d", i))
			if cs := only(evs, session.EventCredentialSwitched); len(cs) != 0 {
				t.Fatalf("credential_switched without a failure: %+v", cs)
			}
		}
		reqs := credIDs(rec.requests())[21:]
		if reqs[0] == used[0] || reqs[1] != reqs[0] || reqs[2] != reqs[0] {
			t.Fatalf("after the block the session used %v (blocked: %s)", reqs, used[0])
		}
	})
}

// 100 sessions starting at once spread evenly over three siblings; each
// keeps its own for its later prompts.
func TestStickySessionsSpread(t *testing.T) {
	m, rec, _ := credManager(t, trio()...)
	sessions := make([]*session.Session, 100)
	for i := range sessions {
		sessions[i] = create(t, m, session.RetryOverrides{})
	}
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Go(func() {
			for turn := range 3 {
				_, sub, err := s.Prompt(context.Background(), fmt.Sprintf("turn %d", turn))
				if err != nil {
					t.Error(err)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				for {
					e, err := sub.Next(ctx)
					if err != nil {
						t.Error(err)
						break
					}
					if e.Type == session.EventPromptEnd {
						break
					}
				}
				cancel()
				sub.Close()
			}
		})
	}
	wg.Wait()
	bySession := map[string]map[string]int{}
	perKey := map[string]int{}
	for _, r := range rec.requests() {
		if bySession[r.SessionID] == nil {
			bySession[r.SessionID] = map[string]int{}
			perKey[r.Credential.ID]++
		}
		bySession[r.SessionID][r.Credential.ID]++
	}
	if len(bySession) != 100 {
		t.Fatalf("%d sessions called the model, want 100", len(bySession))
	}
	for id, keys := range bySession {
		if len(keys) != 1 {
			t.Errorf("session %s used %v: it must stay on one credential", id, keys)
		}
	}
	for _, k := range []string{"key-a", "key-b", "key-c"} {
		if n := perKey[k]; n < 33 || n > 34 {
			t.Errorf("sessions per credential %v: want 33 or 34 each", perKey)
			break
		}
	}
}

// A switch after a usage limit says whether it lost the prompt cache: a
// sibling of another account does, one of the same account does not.
func TestCredentialSwitchedCacheLost(t *testing.T) {
	for _, tc := range []struct {
		name     string
		accounts [2]string
		lost     bool
	}{
		{"own accounts", [2]string{"", ""}, true},
		{"one account", [2]string{"org", "org"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, _, _ := credManager(t, credstore.Credential{ID: "key-a", Secret: "sk-a", Account: tc.accounts[0]},
					credstore.Credential{ID: "key-b", Secret: "sk-b", Account: tc.accounts[1]})
				s := create(t, m, session.RetryOverrides{})
				prompt(t, m, s, "warm the cache")
				evs := prompt(t, m, s, "[[faults: usage,ok]]")
				cs := only(evs, session.EventCredentialSwitched)
				if len(cs) != 1 || cs[0].CacheLost != tc.lost {
					t.Fatalf("credential_switched = %+v, want cacheLost %v", cs, tc.lost)
				}
				ends := only(evs, session.EventMessageEnd)
				if read := ends[len(ends)-1].Usage.CacheReadTokens; (read == 0) != tc.lost {
					t.Errorf("the retry read %d tokens from the cache; cacheLost %v", read, tc.lost)
				}
			})
		})
	}
}

// A fallback before any call read a prompt loses no cache; one after does.
func TestModelChangeCacheLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, _ := fallbackManager(t, nil)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: 529,ok]]")
		if mc := only(evs, session.EventModelChange); len(mc) != 1 || mc[0].CacheLost {
			t.Fatalf("first model_change = %+v, want cacheLost false (nothing was cached)", mc)
		}
		s2 := create(t, m, session.RetryOverrides{})
		prompt(t, m, s2, "warm the cache")
		evs = prompt(t, m, s2, "[[faults: 529,ok]]")
		if mc := only(evs, session.EventModelChange); len(mc) != 1 || !mc[0].CacheLost {
			t.Fatalf("model_change after a warm call = %+v, want cacheLost true", mc)
		}
	})
}

// A credential the provider refuses (401) is not kept: the next call takes
// the next one in rotation, and keeps that.
func TestStickyCredentialDroppedWhenRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, _ := credManager(t, trio()...)
		s := create(t, m, session.RetryOverrides{})
		prompt(t, m, s, "first")
		if evs := prompt(t, m, s, "[[faults: 401]]"); last(evs).Outcome != session.OutcomeFailed {
			t.Fatalf("a 401: %s", kinds(evs))
		}
		prompt(t, m, s, "after")
		prompt(t, m, s, "and again")
		used := credIDs(rec.requests())
		if used[1] != used[0] || used[2] == used[1] || used[3] != used[2] {
			t.Fatalf("calls used %v: want the refused key left, then the next one kept", used)
		}
	})
}
