package credstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

// Tenant-owned credentials: the part of the conformance suite about
// owners (runConformance runs it against both stores).

// ownSecret is the secret of owner's credential id in these tests
// ("secret-<id>" for a server credential, as addTrio's).
func ownSecret(owner, id string) string {
	if owner == "" {
		return "secret-" + id
	}
	return "secret-" + owner + "-" + id
}

func addOwn(t *testing.T, s Store, owner, providerName string, idList ...string) {
	t.Helper()
	for _, id := range idList {
		mustAdd(t, s, Credential{ID: id, Provider: providerName, Secret: ownSecret(owner, id), Owner: owner})
	}
}

// pickAs picks for tenant and returns the owner and ID of the credential,
// told apart by its secret.
func pickAs(t *testing.T, s Store, tenant, providerName string) string {
	t.Helper()
	c, ok, err := s.Pick(testkit.Context(t), tenant, providerName)
	if err != nil || !ok {
		t.Fatalf("Pick(%q, %q) = %v, %t, %v; want a credential", tenant, providerName, c, ok, err)
	}
	switch c.Secret {
	case ownSecret(tenant, c.ID):
		if tenant == "" {
			return "server/" + c.ID
		}
		return tenant + "/" + c.ID
	case ownSecret("", c.ID):
		return "server/" + c.ID
	}
	t.Fatalf("Pick(%q, %q) = %s with a secret neither its own nor the server's", tenant, providerName, c.ID)
	return ""
}

func picksAs(t *testing.T, s Store, tenant, providerName string, n int) string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = pickAs(t, s, tenant, providerName)
	}
	return strings.Join(out, " ")
}

func limitedAs(t *testing.T, s Store, tenant, id string, window time.Duration) Switch {
	t.Helper()
	sw, err := s.UsageLimited(testkit.Context(t), tenant, "p", id, window, true, "usage limit reached for "+id)
	if err != nil {
		t.Fatalf("UsageLimited(%q, %s) = %v", tenant, id, err)
	}
	return sw
}

// listed is f's listing as owner/id pairs ("server" for the server's).
func listed(t *testing.T, s Store, f Filter) string {
	t.Helper()
	infos, err := s.List(testkit.Context(t), f)
	if err != nil {
		t.Fatalf("List(%+v) = %v", f, err)
	}
	out := make([]string, len(infos))
	for i, in := range infos {
		o := in.Owner
		if o == "" {
			o = "server"
		}
		out[i] = in.Provider + ":" + o + "/" + in.ID
	}
	return strings.Join(out, " ")
}

// infoAs is owner's credential id as an admin's listing shows it.
func infoAs(t *testing.T, s Store, owner, id string) Info {
	t.Helper()
	infos, err := s.List(testkit.Context(t), Filter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.Owner == owner && in.ID == id {
			return in
		}
	}
	t.Fatalf("no credential %s of %q in %+v", id, owner, infos)
	return Info{}
}

func runOwnership(t *testing.T, newEnv newEnvFunc) {
	t.Run("PickOwnFirst", func(t *testing.T) {
		s := newEnv(t, 0).open()
		addOwn(t, s, "", "p", "s1", "s2")
		addOwn(t, s, "A", "p", "a1", "a2")
		addOwn(t, s, "B", "p", "b1")
		if got := picksAs(t, s, "A", "p", 4); got != "A/a1 A/a2 A/a1 A/a2" {
			t.Errorf("A's picks = %s; want its own, round-robin", got)
		}
		if got := picksAs(t, s, "B", "p", 2); got != "B/b1 B/b1" {
			t.Errorf("B's picks = %s; want its own", got)
		}
		if got := picksAs(t, s, "C", "p", 4); got != "server/s1 server/s2 server/s1 server/s2" {
			t.Errorf("C (no credential of its own) picks = %s; want the server's, round-robin", got)
		}
		if got := picksAs(t, s, "", "p", 2); got != "server/s1 server/s2" {
			t.Errorf("server-pool picks = %s; want the server's", got)
		}
		if c, ok, err := s.Pick(testkit.Context(t), "A", "q"); ok || err != nil {
			t.Errorf("Pick(A, q) = %v, %t, %v; want nothing (no credential of q)", c, ok, err)
		}
	})

	t.Run("ListByOwner", func(t *testing.T) {
		s := newEnv(t, 0).open()
		addOwn(t, s, "B", "p", "b1")
		addOwn(t, s, "", "p", "s1")
		addOwn(t, s, "A", "p", "a1", "a2")
		addOwn(t, s, "A", "q", "a3")
		addOwn(t, s, "", "q", "s2")
		for _, tc := range []struct {
			f    Filter
			want string
		}{
			{Filter{}, "p:server/s1 q:server/s2"},
			{Filter{Tenant: "A"}, "p:server/s1 p:A/a1 p:A/a2 q:server/s2 q:A/a3"},
			{Filter{Tenant: "B"}, "p:server/s1 p:B/b1 q:server/s2"},
			{Filter{Tenant: "C"}, "p:server/s1 q:server/s2"},
			{Filter{Provider: "p", Tenant: "A"}, "p:server/s1 p:A/a1 p:A/a2"},
			{Filter{Provider: "q", Tenant: "B"}, "q:server/s2"},
			{Filter{All: true}, "p:server/s1 p:A/a1 p:A/a2 p:B/b1 q:server/s2 q:A/a3"},
			{Filter{Provider: "p", All: true, Tenant: "B"}, "p:server/s1 p:A/a1 p:A/a2 p:B/b1"},
		} {
			if got := listed(t, s, tc.f); got != tc.want {
				t.Errorf("List(%+v) = %s, want %s", tc.f, got, tc.want)
			}
		}
		want := Info{ID: "a1", Provider: "p", Source: SourceAPI, Owner: "A", Status: StatusAvailable}
		if got := infoAs(t, s, "A", "a1"); got != want {
			t.Errorf("A's a1 = %+v, want %+v", got, want)
		}
	})

	t.Run("RotationWithinOwnPool", func(t *testing.T) {
		s := newEnv(t, 0).open()
		addOwn(t, s, "", "p", "s1")
		addOwn(t, s, "A", "p", "a1", "a2", "a3")
		addOwn(t, s, "B", "p", "b1", "b2")
		sw := limitedAs(t, s, "A", "a2", time.Hour)
		if !sw.Switched || (sw.To.ID != "a1" && sw.To.ID != "a3") || sw.To.Secret != ownSecret("A", sw.To.ID) {
			t.Fatalf("UsageLimited(A, a2) = %+v; want a switch to a1 or a3 (A's own siblings)", sw)
		}
		seen := map[string]int{}
		for range 8 {
			seen[pickAs(t, s, "A", "p")]++
		}
		if seen["A/a1"] != 4 || seen["A/a3"] != 4 {
			t.Errorf("A's picks with a2 blocked = %v; want a1 and a3 4 times each", seen)
		}
		// B's pool is B's: A's block changes nothing there.
		if got := picksAs(t, s, "B", "p", 4); got != "B/b1 B/b2 B/b1 B/b2" {
			t.Errorf("B's picks = %s", got)
		}
		if i := infoAs(t, s, "A", "a2"); i.Status != StatusBlocked || i.BlockReason != "usage limit reached for a2" {
			t.Errorf("A's a2 = %+v; want blocked", i)
		}
		if i := infoAs(t, s, "B", "b1"); i.Status != StatusAvailable {
			t.Errorf("B's b1 = %+v; want available", i)
		}
	})

	t.Run("ServerCredentialsAreSiblings", func(t *testing.T) {
		e := newEnv(t, 0)
		s := e.open()
		addOwn(t, s, "", "p", "s1", "s2")
		addOwn(t, s, "A", "p", "a1")
		// A's only own credential is limited: the switch goes to a server
		// credential of A's pool.
		sw := limitedAs(t, s, "A", "a1", 10*time.Minute)
		if !sw.Switched || !strings.HasPrefix(sw.To.ID, "s") || sw.To.Secret != ownSecret("", sw.To.ID) {
			t.Fatalf("UsageLimited(A, a1) = %+v; want a switch to s1 or s2", sw)
		}
		if got := picksAs(t, s, "A", "p", 2); got != "server/s1 server/s2" && got != "server/s2 server/s1" {
			t.Errorf("A's picks with a1 blocked = %s; want the server's", got)
		}
		// A server credential's usage limit is the provider's: it is
		// blocked for every tenant.
		sw = limitedAs(t, s, "A", "s1", 20*time.Minute)
		if !sw.Switched || sw.To.ID != "s2" {
			t.Fatalf("UsageLimited(A, s1) = %+v; want a switch to s2", sw)
		}
		if got := picksAs(t, s, "B", "p", 2); got != "server/s2 server/s2" {
			t.Errorf("B's picks with s1 blocked = %s; want s2", got)
		}
		sw = limitedAs(t, s, "B", "s2", 30*time.Minute)
		if sw.Switched || !sw.HasSibling {
			t.Fatalf("UsageLimited(B, s2) = %+v; want no switch, a sibling (s1)", sw)
		}
		approx(t, "B's SiblingFreeIn", sw.SiblingFreeIn, 20*time.Minute)
		_, ok, err := s.Pick(testkit.Context(t), "A", "p")
		var abe *AllBlockedError
		if !ok || !errors.As(err, &abe) {
			t.Fatalf("Pick(A) with all blocked = %t, %v; want an AllBlockedError", ok, err)
		}
		approx(t, "A's AllBlockedError.In", abe.In, 10*time.Minute)
		// a1 frees up first: A has it again; B (whose pool is s1, s2) does
		// not.
		e.clk.Advance(10*time.Minute + approxTolerance)
		if got := picksAs(t, s, "A", "p", 2); got != "A/a1 A/a1" {
			t.Errorf("A's picks after a1's block = %s; want a1", got)
		}
		if _, _, err := s.Pick(testkit.Context(t), "B", "p"); !errors.Is(err, ErrAllBlocked) {
			t.Errorf("Pick(B) = %v; want ErrAllBlocked (A's a1 is not B's)", err)
		}
		// A limit on an own credential whose siblings are all blocked:
		// the earliest is a server credential's.
		sw = limitedAs(t, s, "A", "a1", time.Hour)
		if sw.Switched || !sw.HasSibling {
			t.Fatalf("UsageLimited(A, a1) = %+v; want no switch", sw)
		}
		approx(t, "A's SiblingFreeIn", sw.SiblingFreeIn, 10*time.Minute-approxTolerance)
	})

	t.Run("IDNamespaces", func(t *testing.T) {
		s := newEnv(t, 0).open()
		ctx := testkit.Context(t)
		addOwn(t, s, "", "p", "s1")
		addOwn(t, s, "A", "p", "x", "a-only")
		// B's "x" is not A's: no collision, no probe.
		addOwn(t, s, "B", "p", "x")
		if got := picksAs(t, s, "A", "p", 2); got != "A/x A/a-only" {
			t.Errorf("A's picks = %s", got)
		}
		if got := picksAs(t, s, "B", "p", 2); got != "B/x B/x" {
			t.Errorf("B's picks = %s; want B's own x", got)
		}
		// Within an owner, IDs are unique across providers; a tenant's are
		// not a server credential's (which it sees).
		for _, c := range []Credential{
			{ID: "x", Provider: "p", Secret: "other", Owner: "A"},
			{ID: "x", Provider: "q", Secret: "other", Owner: "A"},
			{ID: "s1", Provider: "p", Secret: "other", Owner: "A"},
			{ID: "s1", Provider: "q", Secret: "other", Owner: "A"},
		} {
			if _, err := s.Add(ctx, c); !errors.Is(err, ErrExists) {
				t.Errorf("Add(%#v) = %v, want ErrExists", c, err)
			}
		}
		if _, err := s.Add(ctx, Credential{ID: "cfg", Provider: "p", Secret: "s", Owner: "A", Source: SourceConfig}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Add(config credential with an owner) = %v, want ErrInvalid", err)
		}
		// B cannot touch A's credentials: not found, and A's stay.
		if err := s.Delete(ctx, "B", "a-only"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete(B, A's a-only) = %v, want ErrNotFound", err)
		}
		if _, err := s.UsageLimited(ctx, "B", "p", "a-only", time.Hour, true, "limit"); !errors.Is(err, ErrNotFound) {
			t.Errorf("UsageLimited(B, A's a-only) = %v, want ErrNotFound", err)
		}
		if i := infoAs(t, s, "A", "a-only"); i.Status != StatusAvailable {
			t.Errorf("A's a-only after B's attempts = %+v; want available", i)
		}
		// A tenant deleting a server credential is forbidden; nothing
		// changes.
		if err := s.Delete(ctx, "B", "s1"); !errors.Is(err, ErrForbidden) {
			t.Errorf("Delete(B, server s1) = %v, want ErrForbidden", err)
		}
		if err := s.Delete(ctx, "B", "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete(B, nope) = %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "", "a-only"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete(server, A's a-only) = %v, want ErrNotFound (the server's namespace)", err)
		}
		if got := listed(t, s, Filter{All: true}); got != "p:server/s1 p:A/x p:A/a-only p:B/x" {
			t.Errorf("after the refused calls: %s", got)
		}
		// A deletes its x: B's stays.
		if err := s.Delete(ctx, "A", "x"); err != nil {
			t.Fatalf("Delete(A, x) = %v", err)
		}
		if got := listed(t, s, Filter{All: true}); got != "p:server/s1 p:A/a-only p:B/x" {
			t.Errorf("after A deleted its x: %s", got)
		}
		if got := picksAs(t, s, "B", "p", 1); got != "B/x" {
			t.Errorf("B's pick after A deleted its x = %s", got)
		}
		if err := s.Delete(ctx, "A", "x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second Delete(A, x) = %v, want ErrNotFound", err)
		}
		// A server credential added later with a tenant's ID: in that
		// tenant's pool the ID means its own (the server's is shadowed).
		addOwn(t, s, "", "p", "x")
		for range 4 {
			if got := pickAs(t, s, "B", "p"); got != "B/x" {
				t.Fatalf("B's pick with a server x = %s; want B's own x", got)
			}
		}
		if sw := limitedAs(t, s, "B", "x", time.Hour); !sw.Switched || sw.To.ID != "s1" {
			t.Errorf("UsageLimited(B, x) = %+v; want a switch to s1 (the server's x is shadowed)", sw)
		}
		if i, srv := infoAs(t, s, "B", "x"), infoAs(t, s, "", "x"); i.Status != StatusBlocked || srv.Status != StatusAvailable {
			t.Errorf("after B's x was limited: B's = %+v, the server's = %+v; want B's blocked only", i, srv)
		}
		if got := picksAs(t, s, "A", "p", 3); got != "A/a-only A/a-only A/a-only" {
			t.Errorf("A's picks = %s", got)
		}
		if err := s.Delete(ctx, "", "x"); err != nil {
			t.Fatalf("Delete(server, x) = %v", err)
		}
		if i := infoAs(t, s, "B", "x"); i.Status != StatusBlocked {
			t.Errorf("B's x after the server's x was deleted = %+v", i)
		}
		// A tenant's last credential deleted: its pool is the server's.
		if err := s.Delete(ctx, "A", "a-only"); err != nil {
			t.Fatal(err)
		}
		if got := picksAs(t, s, "A", "p", 2); got != "server/s1 server/s1" {
			t.Errorf("A's picks with none of its own = %s", got)
		}
		addOwn(t, s, "A", "p", "x")
		if got := picksAs(t, s, "A", "p", 1); got != "A/x" {
			t.Errorf("A's pick after re-adding x = %s", got)
		}
	})

	t.Run("RedeemWithinPool", func(t *testing.T) {
		s := newEnv(t, 0).open()
		mustAdd(t, s, Credential{ID: "a1", Provider: "p", Secret: ownSecret("A", "a1"), Owner: "A", BankedResets: 1, AutoRedeem: true})
		addOwn(t, s, "B", "p", "b1")
		// B's limit never spends A's reset.
		if sw := limitedAs(t, s, "B", "b1", time.Hour); sw.Switched || sw.Redeemed || sw.HasSibling {
			t.Errorf("UsageLimited(B, b1) = %+v; want nothing (A's a1 is not B's sibling)", sw)
		}
		if sw := limitedAs(t, s, "A", "a1", time.Hour); !sw.Redeemed || sw.To.ID != "a1" || sw.To.Secret != ownSecret("A", "a1") {
			t.Errorf("UsageLimited(A, a1) = %+v; want a redeem of a1", sw)
		}
		if i := infoAs(t, s, "A", "a1"); i.BankedResets != 0 || i.Status != StatusAvailable {
			t.Errorf("A's a1 after the redeem = %+v", i)
		}
	})

	t.Run("OwnersSharedBetweenInstances", func(t *testing.T) {
		e := newEnv(t, 0)
		s1, s2 := e.open(), e.open()
		addOwn(t, s1, "", "p", "s1")
		addOwn(t, s1, "A", "p", "a1", "a2")
		if sw := limitedAs(t, s1, "A", "a1", time.Hour); !sw.Switched || sw.To.ID != "a2" {
			t.Fatalf("UsageLimited(A, a1) = %+v", sw)
		}
		if got := picksAs(t, s2, "A", "p", 2); got != "A/a2 A/a2" {
			t.Errorf("A's picks on the other instance = %s", got)
		}
		if got := listed(t, s2, Filter{All: true}); got != "p:server/s1 p:A/a1 p:A/a2" {
			t.Errorf("the other instance lists %s", got)
		}
		if err := s2.Delete(testkit.Context(t), "A", "a2"); err != nil {
			t.Fatal(err)
		}
		if got := picksAs(t, s1, "A", "p", 1); got != "server/s1" {
			t.Errorf("A's pick after the other instance deleted a2 = %s", got)
		}
	})

	t.Run("ManyTenants", func(t *testing.T) {
		s := newEnv(t, 0).open()
		addOwn(t, s, "", "p", "s1")
		for i := range 5 {
			addOwn(t, s, fmt.Sprintf("t%d", i), "p", "k")
		}
		for i := range 5 {
			tenant := fmt.Sprintf("t%d", i)
			if got := pickAs(t, s, tenant, "p"); got != tenant+"/k" {
				t.Errorf("%s's pick = %s", tenant, got)
			}
		}
		if got := listed(t, s, Filter{Tenant: "t3"}); got != "p:server/s1 p:t3/k" {
			t.Errorf("t3's listing = %s", got)
		}
	})

	t.Run("PicksNameTheOwner", func(t *testing.T) {
		// The session keeps a tenant's own key's failures to that tenant:
		// every credential handed out says whose it is.
		s := newEnv(t, 0).open()
		addOwn(t, s, "", "p", "s1")
		addOwn(t, s, "A", "p", "a1", "a2")
		ctx := testkit.Context(t)
		for _, tc := range []struct{ tenant, want string }{{"A", "A"}, {"C", ""}} {
			c, ok, err := s.Pick(ctx, tc.tenant, "p")
			if !ok || err != nil || c.Owner != tc.want {
				t.Errorf("Pick(%s) = %+v, %t, %v; want Owner %q", tc.tenant, c, ok, err, tc.want)
			}
		}
		if c, _, err := s.PickPreferred(ctx, "A", "p", "a2"); err != nil || c.ID != "a2" || c.Owner != "A" {
			t.Errorf("PickPreferred(A, a2) = %+v, %v", c, err)
		}
		if sw := limitedAs(t, s, "A", "a1", time.Hour); !sw.Switched || sw.To.ID != "a2" || sw.To.Owner != "A" {
			t.Errorf("A's a1 limited: %+v; want a switch to its own a2", sw)
		}
		if sw := limitedAs(t, s, "A", "a2", time.Hour); !sw.Switched || sw.To.ID != "s1" || sw.To.Owner != "" {
			t.Errorf("A's a2 limited: %+v; want a switch to the server's s1", sw)
		}
	})

	t.Run("OwnerLimit", func(t *testing.T) {
		// Several instances (replicas, for Redis) race to add a tenant's
		// credentials: exactly testMaxPerOwner of them land.
		e := newEnv(t, 0)
		stores := []Store{e.open(), e.open()}
		const tries = 3 * testMaxPerOwner
		errs := make([]error, tries)
		var wg sync.WaitGroup
		for i := range tries {
			wg.Go(func() {
				_, errs[i] = stores[i%2].Add(testkit.Context(t), Credential{ID: fmt.Sprintf("k%d", i), Provider: "p", Secret: "x", Owner: "A"})
			})
		}
		wg.Wait()
		added := 0
		for i, err := range errs {
			var le *LimitError
			switch {
			case err == nil:
				added++
			case errors.As(err, &le) && errors.Is(err, ErrLimit):
				if le.Limit != testMaxPerOwner || le.Provider != "p" || strings.Contains(err.Error(), "x\"") {
					t.Errorf("k%d: %v; want the limit and provider named", i, err)
				}
			default:
				t.Errorf("k%d: %v; want nil or a *LimitError", i, err)
			}
		}
		if added != testMaxPerOwner {
			t.Fatalf("%d of %d racing adds landed; want exactly %d", added, tries, testMaxPerOwner)
		}
		if n := strings.Count(listed(t, stores[1], Filter{Tenant: "A"}), "A/"); n != testMaxPerOwner {
			t.Errorf("A lists %d of its own; want %d", n, testMaxPerOwner)
		}
		// Another provider, another tenant and the server's pool are
		// bounded apart; a delete makes room.
		addOwn(t, stores[0], "A", "q", "other")
		addOwn(t, stores[0], "B", "p", "b1")
		for i := range testMaxPerOwner + 1 {
			addOwn(t, stores[1], "", "p", fmt.Sprintf("s%d", i))
		}
		var first string
		for i, err := range errs {
			if err == nil {
				first = fmt.Sprintf("k%d", i)
				break
			}
		}
		if err := stores[1].Delete(testkit.Context(t), "A", first); err != nil {
			t.Fatal(err)
		}
		addOwn(t, stores[0], "A", "p", "again")
		if _, err := stores[1].Add(testkit.Context(t), Credential{ID: "more", Provider: "p", Secret: "x", Owner: "A"}); !errors.Is(err, ErrLimit) {
			t.Errorf("Add over the limit after the delete's room was taken = %v; want ErrLimit", err)
		}
	})
}

// testMaxPerOwner is MaxPerOwner in the conformance suite's stores.
const testMaxPerOwner = 8
