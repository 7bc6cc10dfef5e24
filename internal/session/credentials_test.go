package session_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// credManager has the sim provider with the given credentials in a memory
// credential store (whose clock is synctest's).
func credManager(t *testing.T, creds ...credstore.Credential) (*session.Manager, *recorder, *credstore.Memory) {
	t.Helper()
	store := credstore.NewMemory(credstore.MemoryOptions{})
	for _, c := range creds {
		c.Provider = "sim"
		if _, err := store.Add(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{Provider: sim.New(sim.Options{})}
	m := session.NewManager(session.Options{
		Providers:   []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Client: rec}},
		Retry:       retry.DefaultSettings(),
		Credentials: store,
		Rand:        func() float64 { return 1 },
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, rec, store
}

func credIDs(reqs []provider.Request) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.Credential.ID
	}
	return out
}

func TestUsageLimitSwitchesToSiblingAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, store := credManager(t, credstore.Credential{ID: "key-a", Secret: "sk-a"}, credstore.Credential{ID: "key-b", Secret: "sk-b"})
		s := create(t, m, session.RetryOverrides{})
		start := time.Now()
		evs := prompt(t, m, s, "[[faults: usage,ok]]")
		if time.Since(start) != 0 {
			t.Fatalf("waited %v despite a sibling", time.Since(start))
		}
		cs := only(evs, session.EventCredentialSwitched)
		if len(cs) != 1 || cs[0].Provider != "sim" || cs[0].From != "key-a" || cs[0].To != "key-b" {
			t.Fatalf("credential_switched = %+v (%s)", cs, kinds(evs))
		}
		if st := only(evs, session.EventAutoRetryStart)[0]; st.Delay != 0 || st.DelaySource != "switch" || st.ErrorClass != "usage_limit" {
			t.Fatalf("auto_retry_start = %+v", st)
		}
		if got := credIDs(rec.requests()); len(got) != 2 || got[0] != "key-a" || got[1] != "key-b" {
			t.Fatalf("calls used %v", got)
		}
		// key-a stays blocked: the next prompt goes straight to key-b.
		infos, _ := store.List(context.Background(), credstore.Filter{Provider: "sim"})
		if infos[0].Status != credstore.StatusBlocked || infos[1].Status != credstore.StatusAvailable {
			t.Fatalf("credentials = %+v", infos)
		}
		prompt(t, m, s, "next")
		if got := credIDs(rec.requests()); got[2] != "key-b" {
			t.Fatalf("next prompt used %s", got[2])
		}
		// Secrets never appear in events.
		for _, e := range evs {
			if e.From == "sk-a" || e.To == "sk-b" {
				t.Fatalf("secret in event %+v", e)
			}
		}
	})
}

func TestUsageLimitWaitsForEarliestSibling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, _, store := credManager(t, credstore.Credential{ID: "key-a", Secret: "sk-a"}, credstore.Credential{ID: "key-b", Secret: "sk-b"})
		// key-b is blocked for 20 s already.
		if _, err := store.UsageLimited(context.Background(), "", "sim", "key-b", 20*time.Second, true, "test"); err != nil {
			t.Fatal(err)
		}
		s := create(t, m, session.RetryOverrides{})
		start := time.Now()
		// key-a hits a usage limit with a one-hour window: wait for key-b
		// (20 s + 1 s buffer), not the hour.
		evs := prompt(t, m, s, "[[faults: usage:retry-after=3600,ok]]")
		st := only(evs, session.EventAutoRetryStart)
		if len(st) != 1 || st[0].Delay != 21*time.Second || st[0].DelaySource != "sibling" {
			t.Fatalf("auto_retry_start = %+v", st)
		}
		if time.Since(start) != 21*time.Second || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("after %v: %+v", time.Since(start), last(evs))
		}
	})
}

func TestEveryCredentialBlockedWaitsForTheFirstToFreeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, store := credManager(t, credstore.Credential{ID: "key-a", Secret: "sk-a"})
		if _, err := store.UsageLimited(context.Background(), "", "sim", "key-a", 30*time.Second, true, "test"); err != nil {
			t.Fatal(err)
		}
		s := create(t, m, session.RetryOverrides{})
		start := time.Now()
		evs := prompt(t, m, s, "hello")
		st := only(evs, session.EventAutoRetryStart)
		if len(st) != 1 || st[0].ErrorClass != "usage_limit" || st[0].Delay != 31*time.Second {
			t.Fatalf("auto_retry_start = %+v (%s)", st, kinds(evs))
		}
		if time.Since(start) != 31*time.Second || last(evs).Outcome != session.OutcomeCompleted {
			t.Fatalf("after %v: %+v", time.Since(start), last(evs))
		}
		if got := credIDs(rec.requests()); len(got) != 1 || got[0] != "key-a" {
			t.Fatalf("calls used %v", got)
		}
	})
}

func TestBankedResetRedeemedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, store := credManager(t, credstore.Credential{ID: "only", Secret: "sk", BankedResets: 1, AutoRedeem: true})
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: usage:retry-after=3600,ok]]")
		if st := only(evs, session.EventAutoRetryStart); len(st) != 1 || st[0].Delay != 0 {
			t.Fatalf("auto_retry_start = %+v", st)
		}
		if got := credIDs(rec.requests()); len(got) != 2 || got[1] != "only" {
			t.Fatalf("calls used %v", got)
		}
		infos, _ := store.List(context.Background(), credstore.Filter{Provider: "sim"})
		if infos[0].BankedResets != 0 || infos[0].Status != credstore.StatusAvailable {
			t.Fatalf("credential after redeem = %+v", infos[0])
		}
		// No reset left: the next usage limit fails fast on the hour-long
		// window (past max_delay_ms).
		evs = prompt(t, m, s, "[[faults: usage:retry-after=3600,ok]]")
		if end := only(evs, session.EventAutoRetryEnd); len(end) != 1 || end[0].Success {
			t.Fatalf("without a banked reset: %s %+v", kinds(evs), end)
		}
	})
}

// pickCounter counts the store's picks.
type pickCounter struct {
	credstore.Store
	picks atomic.Int32
}

func (c *pickCounter) PickPreferred(ctx context.Context, tenant, p, prefer string) (provider.Credential, bool, error) {
	c.picks.Add(1)
	return c.Store.PickPreferred(ctx, tenant, p, prefer)
}

// A switch hands the retry its sibling: the store chose it in the same call
// that blocked the credential (one round trip to a shared store), so the
// retry does not pick again. Later calls pick as usual.
func TestSwitchedCredentialIsNotPickedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := credstore.NewMemory(credstore.MemoryOptions{})
		for _, id := range []string{"key-a", "key-b", "key-c"} {
			if _, err := store.Add(context.Background(), credstore.Credential{ID: id, Provider: "sim", Secret: "sk-" + id}); err != nil {
				t.Fatal(err)
			}
		}
		counter := &pickCounter{Store: store}
		rec := &recorder{Provider: sim.New(sim.Options{})}
		m := session.NewManager(session.Options{
			Providers:   []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Client: rec}},
			Retry:       retry.DefaultSettings(),
			Credentials: counter,
			Rand:        func() float64 { return 1 },
		})
		defer m.Close(context.Background())
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: usage,usage,ok]]")
		if end := only(evs, session.EventPromptEnd); end[0].Outcome != session.OutcomeCompleted {
			t.Fatalf("prompt_end = %+v", end)
		}
		if got := credIDs(rec.requests()); len(got) != 3 || got[0] != "key-a" || got[1] != "key-b" || got[2] != "key-c" {
			t.Fatalf("calls used %v", got)
		}
		if n := counter.picks.Load(); n != 1 {
			t.Fatalf("%d picks for one prompt with two switches; want 1", n)
		}
		for i, e := range only(evs, session.EventMessageStart) {
			if want := []string{"key-a", "key-b", "key-c"}[i]; e.Credential != want {
				t.Fatalf("message_start %d credential = %q, want %q", i, e.Credential, want)
			}
		}
		prompt(t, m, s, "next")
		if n := counter.picks.Load(); n != 2 {
			t.Fatalf("the next prompt: %d picks in all; want 2", n)
		}
		if got := credIDs(rec.requests()); got[3] != "key-c" {
			t.Fatalf("next prompt used %s (key-a and key-b are blocked)", got[3])
		}
	})
}
