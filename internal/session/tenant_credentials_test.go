package session_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/session"
)

// A session picks from its tenant's pool: the tenant's own credentials
// first, then the server's; a usage limit switches within that pool, and
// another tenant's credentials are never used.
func TestSessionsPickFromTheirTenantsPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, rec, store := credManager(t,
			credstore.Credential{ID: "srv", Secret: "sk-srv"},
			credstore.Credential{ID: "a1", Secret: "sk-a1", Owner: "A"},
			credstore.Credential{ID: "a2", Secret: "sk-a2", Owner: "A"},
			credstore.Credential{ID: "b1", Secret: "sk-b1", Owner: "B"},
		)
		newSession := func(tenant string) *session.Session {
			s, err := m.Create(context.Background(), tenant, session.CreateParams{Model: "sim/echo"})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		a, b, c := newSession("A"), newSession("B"), newSession("C")

		evs := prompt(t, m, a, "[[faults: usage,ok]]")
		if cs := only(evs, session.EventCredentialSwitched); len(cs) != 1 || cs[0].From != "a1" || cs[0].To != "a2" {
			t.Fatalf("A's credential_switched = %+v (%s); want a1 to a2, its own", cs, kinds(evs))
		}
		prompt(t, m, b, "hi")
		prompt(t, m, c, "hi")
		// a2 limited too: A's pool goes on with the server's credential.
		evs = prompt(t, m, a, "[[faults: usage,ok]]")
		if cs := only(evs, session.EventCredentialSwitched); len(cs) != 1 || cs[0].From != "a2" || cs[0].To != "srv" {
			t.Fatalf("A's second credential_switched = %+v (%s); want a2 to srv", cs, kinds(evs))
		}
		got := credIDs(rec.requests())
		if want := []string{"a1", "a2", "b1", "srv", "a2", "srv"}; !slices.Equal(got, want) {
			t.Fatalf("calls used %v, want %v", got, want)
		}
		// B's credential was never touched by A's limits.
		infos, _ := store.List(context.Background(), credstore.Filter{Tenant: "B"})
		for _, i := range infos {
			if i.Status != credstore.StatusAvailable {
				t.Fatalf("B's pool after A's limits: %+v", infos)
			}
		}
	})
}
