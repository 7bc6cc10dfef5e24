package credstore

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

// env is one backend's shared state: every store open returns shares it
// (Memory: the same store; Redis: a new store instance, with its own client,
// on the same Redis and key prefix — like another replica).
type env struct {
	clk  *testkit.Clock
	open func() Store
}

// newEnvFunc creates an env; redeemMin is RedeemMinBlocked.
type newEnvFunc func(t *testing.T, redeemMin time.Duration) env

// approxTolerance absorbs the real time that passes between a call and the
// Redis script's TIME (Memory's fake clock is exact).
const approxTolerance = time.Second

func approx(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if d := got - want; d < -approxTolerance || d > approxTolerance {
		t.Errorf("%s = %v, want %v (±%v)", what, got, want, approxTolerance)
	}
}

func mustAdd(t *testing.T, s Store, c Credential) Info {
	t.Helper()
	info, err := s.Add(testkit.Context(t), c)
	if err != nil {
		t.Fatalf("Add(%s) = %v", c.ID, err)
	}
	return info
}

func infoOf(t *testing.T, s Store, providerName, id string) Info {
	t.Helper()
	infos, err := s.List(testkit.Context(t), Filter{Provider: providerName, All: true})
	if err != nil {
		t.Fatalf("List(%q) = %v", providerName, err)
	}
	for _, i := range infos {
		if i.ID == id {
			return i
		}
	}
	t.Fatalf("List(%q) has no %s: %+v", providerName, id, infos)
	return Info{}
}

func ids(infos []Info) string {
	var b strings.Builder
	for i, in := range infos {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(in.ID)
	}
	return b.String()
}

// addTrio adds credentials a, b, c of provider p (secrets "secret-a", …).
func addTrio(t *testing.T, s Store) {
	for _, id := range []string{"a", "b", "c"} {
		mustAdd(t, s, Credential{ID: id, Provider: "p", Secret: "secret-" + id})
	}
}

func usageLimited(t *testing.T, s Store, id string, window time.Duration, fromProvider bool) Switch {
	t.Helper()
	sw, err := s.UsageLimited(testkit.Context(t), "", "p", id, window, fromProvider, "usage limit reached for "+id)
	if err != nil {
		t.Fatalf("UsageLimited(%s) = %v", id, err)
	}
	return sw
}

func pickID(t *testing.T, s Store, providerName string) string {
	t.Helper()
	c, ok, err := s.Pick(testkit.Context(t), "", providerName)
	if err != nil || !ok {
		t.Fatalf("Pick(%q) = %v, %t, %v; want a credential", providerName, c, ok, err)
	}
	if c.Secret != "secret-"+c.ID {
		t.Fatalf("Pick(%q) = %s with the wrong secret", providerName, c.ID)
	}
	return c.ID
}

// runConformance is the behaviour both stores must have.
func runConformance(t *testing.T, newEnv newEnvFunc) {
	t.Run("EmptyProvider", func(t *testing.T) {
		s := newEnv(t, 0).open()
		c, ok, err := s.Pick(testkit.Context(t), "", "nobody")
		if ok || err != nil {
			t.Errorf("Pick(nobody) = %v, %t, %v; want nothing, false, nil", c, ok, err)
		}
		if infos, err := s.List(testkit.Context(t), Filter{Provider: "nobody"}); err != nil || len(infos) != 0 {
			t.Errorf("List(nobody) = %v, %v; want none", infos, err)
		}
		if err := s.Ready(testkit.Context(t)); err != nil || s.Degraded() {
			t.Errorf("Ready() = %v, Degraded() = %t; want nil, false", err, s.Degraded())
		}
	})

	t.Run("RoundRobin", func(t *testing.T) {
		s := newEnv(t, 0).open()
		addTrio(t, s)
		var got []string
		for range 6 {
			got = append(got, pickID(t, s, "p"))
		}
		if g := strings.Join(got, ""); g != "abcabc" {
			t.Errorf("six picks = %s, want abcabc", g)
		}
	})

	t.Run("PickPreferred", func(t *testing.T) {
		e := newEnv(t, 0)
		s := e.open()
		addTrio(t, s)
		mustAdd(t, s, Credential{ID: "own", Provider: "p", Secret: "secret-own", Owner: "team"})
		prefer := func(tenant, id string) string {
			t.Helper()
			c, ok, err := s.PickPreferred(testkit.Context(t), tenant, "p", id)
			if err != nil || !ok || c.Secret != "secret-"+c.ID {
				t.Fatalf("PickPreferred(%q, %q) = %v, %t, %v", tenant, id, c.ID, ok, err)
			}
			return c.ID
		}
		// Kept however often, without moving the rotation.
		for range 5 {
			if id := prefer("", "b"); id != "b" {
				t.Fatalf("PickPreferred(b) = %s, want b", id)
			}
		}
		if id := pickID(t, s, "p"); id != "a" {
			t.Errorf("Pick after preferred picks = %s, want a (the rotation did not move)", id)
		}
		// Blocked, unknown, or outside the tenant's pool: what Pick picks.
		usageLimited(t, s, "b", 10*time.Minute, true)
		// (The switch UsageLimited made moved the rotation: only which
		// credentials may come is checked.)
		if id := prefer("", "b"); id != "a" && id != "c" {
			t.Errorf("PickPreferred(b) while b is blocked = %s, want a or c", id)
		}
		if id := prefer("", "gone"); id != "a" && id != "c" {
			t.Errorf("PickPreferred(gone) = %s, want a or c", id)
		}
		if id := prefer("", "own"); id == "own" {
			t.Errorf("the server's pool kept another tenant's credential")
		}
		if id := prefer("team", "own"); id != "own" {
			t.Errorf("PickPreferred(team, own) = %s, want own", id)
		}
		if id := prefer("team", "c"); id != "own" {
			t.Errorf("PickPreferred(team, c) = %s: the tenant's own available credential comes first", id)
		}
		if _, err := s.UsageLimited(testkit.Context(t), "team", "p", "own", time.Hour, true, "test"); err != nil {
			t.Fatal(err)
		}
		if id := prefer("team", "c"); id != "c" {
			t.Errorf("PickPreferred(team, c) with its own blocked = %s: a server credential of the tenant's pool is kept then", id)
		}
		e.clk.Advance(10*time.Minute + approxTolerance)
		if id := prefer("", "b"); id != "b" {
			t.Errorf("PickPreferred(b) after its block = %s, want b", id)
		}
	})

	t.Run("PickSkipsBlocked", func(t *testing.T) {
		s := newEnv(t, 0).open()
		addTrio(t, s)
		sw := usageLimited(t, s, "b", 10*time.Minute, true)
		if !sw.Switched || sw.To.ID == "b" || sw.To.Secret != "secret-"+sw.To.ID || sw.Redeemed {
			t.Fatalf("UsageLimited(b) = %+v; want a switch to a or c", sw)
		}
		seen := map[string]int{}
		for range 8 {
			seen[pickID(t, s, "p")]++
		}
		if seen["b"] != 0 || seen["a"] != 4 || seen["c"] != 4 {
			t.Errorf("picks with b blocked = %v, want a and c 4 times each", seen)
		}
	})

	t.Run("AllBlocked", func(t *testing.T) {
		s := newEnv(t, 0).open()
		mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a"})
		mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b"})
		usageLimited(t, s, "a", 5*time.Minute, true)
		sw := usageLimited(t, s, "b", 2*time.Minute, true)
		if sw.Switched || !sw.HasSibling {
			t.Fatalf("UsageLimited(b) = %+v; want no switch, a sibling", sw)
		}
		approx(t, "SiblingFreeIn", sw.SiblingFreeIn, 5*time.Minute)
		_, ok, err := s.Pick(testkit.Context(t), "", "p")
		var abe *AllBlockedError
		if !ok || !errors.Is(err, ErrAllBlocked) || !errors.As(err, &abe) {
			t.Fatalf("Pick = %t, %v; want an AllBlockedError", ok, err)
		}
		approx(t, "AllBlockedError.In", abe.In, 2*time.Minute)
		if abe.Provider != "p" || !strings.Contains(err.Error(), "frees up in") {
			t.Errorf("Pick error = %q", err)
		}
	})

	t.Run("EarliestSiblingUnblock", func(t *testing.T) {
		s := newEnv(t, 0).open()
		addTrio(t, s)
		usageLimited(t, s, "b", 3*time.Minute, true)
		usageLimited(t, s, "c", time.Minute, false)
		sw := usageLimited(t, s, "a", 10*time.Minute, true)
		if sw.Switched || !sw.HasSibling {
			t.Fatalf("UsageLimited(a) = %+v; want no switch, a sibling", sw)
		}
		approx(t, "SiblingFreeIn", sw.SiblingFreeIn, time.Minute)

		mustAdd(t, s, Credential{ID: "solo", Provider: "q", Secret: "secret-solo"})
		sw, err := s.UsageLimited(testkit.Context(t), "", "q", "solo", time.Minute, true, "limit")
		if err != nil || sw != (Switch{}) {
			t.Errorf("UsageLimited(solo) = %+v, %v; want no switch, no sibling", sw, err)
		}
	})

	t.Run("BlockKeepsLaterTime", func(t *testing.T) {
		e := newEnv(t, 0)
		s := e.open()
		addTrio(t, s)
		usageLimited(t, s, "a", 10*time.Minute, true)
		usageLimited(t, s, "a", time.Minute, true)
		approx(t, "a blocked for", infoOf(t, s, "p", "a").BlockedUntil.Sub(e.clk.Now()), 10*time.Minute)
		// A window the provider stated replaces agentd's estimate.
		usageLimited(t, s, "b", 30*time.Minute, false)
		if i := infoOf(t, s, "p", "b"); !i.BlockEstimated {
			t.Errorf("b after an estimated window: BlockEstimated = false")
		}
		usageLimited(t, s, "b", 2*time.Minute, true)
		i := infoOf(t, s, "p", "b")
		approx(t, "b blocked for", i.BlockedUntil.Sub(e.clk.Now()), 2*time.Minute)
		if i.BlockEstimated || i.Status != StatusBlocked || i.BlockReason != "usage limit reached for b" {
			t.Errorf("b = %+v; want blocked by the provider's window", i)
		}
		// An estimate does not shorten the provider's window.
		usageLimited(t, s, "b", 20*time.Second, false)
		approx(t, "b blocked for", infoOf(t, s, "p", "b").BlockedUntil.Sub(e.clk.Now()), 2*time.Minute)
	})

	t.Run("DefaultWindow", func(t *testing.T) {
		e := newEnv(t, 0)
		s := e.open()
		addTrio(t, s)
		usageLimited(t, s, "a", 0, true)
		approx(t, "a blocked for", infoOf(t, s, "p", "a").BlockedUntil.Sub(e.clk.Now()), DefaultBlock)
	})

	t.Run("Expiry", func(t *testing.T) {
		e := newEnv(t, 0)
		s := e.open()
		mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a"})
		usageLimited(t, s, "a", 2*time.Minute, true)
		if _, _, err := s.Pick(testkit.Context(t), "", "p"); !errors.Is(err, ErrAllBlocked) {
			t.Fatalf("Pick while blocked = %v; want ErrAllBlocked", err)
		}
		e.clk.Advance(2*time.Minute + approxTolerance)
		if i := infoOf(t, s, "p", "a"); i.Status != StatusAvailable || !i.BlockedUntil.IsZero() || i.BlockReason != "" {
			t.Errorf("a after its block = %+v; want available", i)
		}
		if id := pickID(t, s, "p"); id != "a" {
			t.Errorf("Pick after expiry = %s, want a", id)
		}
	})

	t.Run("RedeemOnce", func(t *testing.T) {
		s := newEnv(t, 0).open()
		mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a", BankedResets: 1, AutoRedeem: true})
		mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b"})
		usageLimited(t, s, "b", time.Hour, true)
		sw := usageLimited(t, s, "a", time.Hour, true)
		if !sw.Switched || !sw.Redeemed || sw.To.ID != "a" || sw.To.Secret != "secret-a" || sw.BankedLeft != 0 {
			t.Fatalf("UsageLimited(a) = %+v; want a redeem of a", sw)
		}
		if i := infoOf(t, s, "p", "a"); i.Status != StatusAvailable || i.BankedResets != 0 {
			t.Errorf("a after the redeem = %+v; want available, 0 banked", i)
		}
		if id := pickID(t, s, "p"); id != "a" {
			t.Errorf("Pick after the redeem = %s, want a", id)
		}
		sw = usageLimited(t, s, "a", time.Hour, true)
		if sw.Switched || sw.Redeemed || !sw.HasSibling {
			t.Errorf("second UsageLimited(a) = %+v; want no switch (nothing banked)", sw)
		}
		approx(t, "SiblingFreeIn", sw.SiblingFreeIn, time.Hour)
	})

	t.Run("RedeemSibling", func(t *testing.T) {
		s := newEnv(t, 0).open()
		mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a"})
		mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b", BankedResets: 2, AutoRedeem: true})
		usageLimited(t, s, "b", time.Hour, true)
		sw := usageLimited(t, s, "a", time.Hour, true)
		if !sw.Switched || !sw.Redeemed || sw.To.ID != "b" || sw.BankedLeft != 1 {
			t.Fatalf("UsageLimited(a) = %+v; want a redeem of b", sw)
		}
		if a, b := infoOf(t, s, "p", "a"), infoOf(t, s, "p", "b"); a.Status != StatusBlocked || b.Status != StatusAvailable || b.BankedResets != 1 {
			t.Errorf("after the redeem: a = %+v, b = %+v", a, b)
		}
	})

	t.Run("AutoRedeemIsOptIn", func(t *testing.T) {
		s := newEnv(t, 0).open()
		mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a", BankedResets: 3})
		sw := usageLimited(t, s, "a", time.Hour, true)
		if sw.Switched || sw.Redeemed {
			t.Errorf("UsageLimited(a) without AutoRedeem = %+v; want no switch", sw)
		}
		if i := infoOf(t, s, "p", "a"); i.BankedResets != 3 || i.AutoRedeem || i.Status != StatusBlocked {
			t.Errorf("a = %+v; want blocked, 3 banked", i)
		}
	})

	t.Run("RedeemMinBlocked", func(t *testing.T) {
		s := newEnv(t, time.Hour).open()
		mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a", BankedResets: 1, AutoRedeem: true})
		if sw := usageLimited(t, s, "a", 10*time.Minute, true); sw.Switched {
			t.Errorf("UsageLimited(a, 10m) with a 1h minimum = %+v; want no redeem", sw)
		}
		if sw := usageLimited(t, s, "a", 2*time.Hour, true); !sw.Redeemed {
			t.Errorf("UsageLimited(a, 2h) with a 1h minimum = %+v; want a redeem", sw)
		}
	})

	t.Run("DeleteAndList", func(t *testing.T) {
		s := newEnv(t, 0).open()
		ctx := testkit.Context(t)
		mustAdd(t, s, Credential{ID: "y", Provider: "p1", Secret: "secret-y", Source: SourceConfig})
		mustAdd(t, s, Credential{ID: "x", Provider: "p1", Secret: "secret-x", BankedResets: 2, AutoRedeem: true})
		mustAdd(t, s, Credential{ID: "z", Provider: "p0", Secret: "secret-z"})
		all, err := s.List(ctx, Filter{Provider: ""})
		if err != nil || ids(all) != "z,y,x" {
			t.Fatalf("List() = %s, %v; want z,y,x", ids(all), err)
		}
		want := Info{ID: "x", Provider: "p1", Source: SourceAPI, Status: StatusAvailable, BankedResets: 2, AutoRedeem: true}
		if all[2] != want {
			t.Errorf("List()[2] = %+v, want %+v", all[2], want)
		}
		if p1, err := s.List(ctx, Filter{Provider: "p1"}); err != nil || ids(p1) != "y,x" {
			t.Errorf("List(p1) = %s, %v; want y,x", ids(p1), err)
		}
		if err := s.Delete(ctx, "", "y"); !errors.Is(err, ErrReadOnly) {
			t.Errorf("Delete(config y) = %v, want ErrReadOnly", err)
		}
		if err := s.Delete(ctx, "", "nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete(nope) = %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "", "x"); err != nil {
			t.Fatalf("Delete(x) = %v", err)
		}
		if p1, err := s.List(ctx, Filter{Provider: "p1"}); err != nil || ids(p1) != "y" {
			t.Errorf("List(p1) after Delete(x) = %s, %v; want y", ids(p1), err)
		}
		for range 3 {
			if id := pickID(t, s, "p1"); id != "y" {
				t.Errorf("Pick(p1) after Delete(x) = %s, want y", id)
			}
		}
		if err := s.Delete(ctx, "", "x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second Delete(x) = %v, want ErrNotFound", err)
		}
		mustAdd(t, s, Credential{ID: "x", Provider: "p1", Secret: "secret-x"})
		if p1, _ := s.List(ctx, Filter{Provider: "p1"}); ids(p1) != "y,x" {
			t.Errorf("List(p1) after re-adding x = %s, want y,x", ids(p1))
		}
	})

	t.Run("AddErrors", func(t *testing.T) {
		s := newEnv(t, 0).open()
		ctx := testkit.Context(t)
		mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a"})
		for _, c := range []Credential{
			{ID: "a", Provider: "p", Secret: "other"},
			{ID: "a", Provider: "q", Secret: "other"},
			{ID: "a", Provider: "p", Secret: "other", Source: SourceConfig},
		} {
			if _, err := s.Add(ctx, c); !errors.Is(err, ErrExists) {
				t.Errorf("Add(%#v) = %v, want ErrExists", c, err)
			}
		}
		for _, c := range []Credential{
			{ID: "e", Provider: "p"},
			{ID: "e", Secret: "s"},
			{ID: "e", Provider: "p", Secret: "s", BankedResets: -1},
			{ID: "e", Provider: "p", Secret: "s", Source: "env"},
		} {
			if _, err := s.Add(ctx, c); !errors.Is(err, ErrInvalid) {
				t.Errorf("Add(%#v) = %v, want ErrInvalid", c, err)
			}
		}
		info := mustAdd(t, s, Credential{Provider: "p", Secret: "s"})
		if !strings.HasPrefix(info.ID, "cred_") || info.Source != SourceAPI {
			t.Errorf("Add without ID = %+v; want a generated cred_ ID, source api", info)
		}
		if _, err := s.UsageLimited(ctx, "", "p", "nope", time.Minute, true, ""); !errors.Is(err, ErrNotFound) {
			t.Errorf("UsageLimited(nope) = %v, want ErrNotFound", err)
		}
		if _, err := s.UsageLimited(ctx, "", "q", "a", time.Minute, true, ""); !errors.Is(err, ErrNotFound) {
			t.Errorf("UsageLimited(q, a) = %v, want ErrNotFound", err)
		}
	})

	t.Run("ConfigReAdd", func(t *testing.T) {
		e := newEnv(t, 0)
		s := e.open()
		ctx := testkit.Context(t)
		cfg := Credential{ID: "a", Provider: "p", Secret: "old", Source: SourceConfig, BankedResets: 2, AutoRedeem: true}
		mustAdd(t, s, cfg)
		if sw := usageLimited(t, s, "a", time.Hour, true); !sw.Redeemed || sw.BankedLeft != 1 {
			t.Fatalf("UsageLimited(a) = %+v; want a redeem", sw)
		}
		usageLimited(t, s, "a", time.Hour, true) // blocked again, 0 banked after a second redeem
		// Another replica starts with the same configuration and a new
		// secret: the spent resets stay spent, the block stays.
		cfg.Secret = "secret-a"
		s2 := e.open()
		info, err := s2.Add(ctx, cfg)
		if err != nil || info.BankedResets != 0 || info.Status != StatusAvailable {
			t.Fatalf("re-Add(a) = %+v, %v; want 0 banked, available (the second redeem)", info, err)
		}
		cfg.BankedResets = 5 // the operator banks 3 more
		if info, err = s2.Add(ctx, cfg); err != nil || info.BankedResets != 3 {
			t.Errorf("re-Add(a, 5 banked) = %+v, %v; want 3 banked", info, err)
		}
		if id := pickID(t, s, "p"); id != "a" {
			t.Errorf("Pick = %s", id)
		}
	})

	t.Run("SecretsNeverShown", func(t *testing.T) {
		s := newEnv(t, 0).open()
		ctx := testkit.Context(t)
		const secret = "sk-VERY-SECRET-1234"
		c := Credential{ID: "a", Provider: "p", Secret: secret, Source: SourceAPI}
		info := mustAdd(t, s, c)
		mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b"})
		_, addErr := s.Add(ctx, c)
		long := strings.Repeat("é", 400)
		if _, err := s.UsageLimited(ctx, "", "p", "a", time.Hour, true, "quota exceeded for key "+secret+"\n"+long); err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx, Filter{Provider: ""})
		if err != nil {
			t.Fatal(err)
		}
		if r := infoOf(t, s, "p", "a").BlockReason; len(r) > maxReasonBytes || !strings.HasPrefix(r, "quota exceeded for key [redacted] é") {
			t.Errorf("BlockReason = %q (%d bytes); want the secret redacted, at most %d bytes", r, len(r), maxReasonBytes)
		}
		var logged bytes.Buffer
		slog.New(slog.NewTextHandler(&logged, nil)).Info("credential", "c", c)
		js, _ := json.Marshal(struct {
			C     Credential
			I     Info
			Infos []Info
		}{c, info, list})
		shown := strings.Join([]string{
			fmt.Sprintf("%v %+v %#v %s %q %d %x", c, c, c, c, c, c, c),
			fmt.Sprintf("%v %+v %#v", &c, info, list),
			logged.String(), string(js), addErr.Error(),
		}, "\n")
		if strings.Contains(shown, secret) || strings.Contains(shown, fmt.Sprintf("%x", secret)) {
			t.Errorf("the secret shows:\n%s", shown)
		}
	})

	t.Run("SharedBetweenInstances", func(t *testing.T) {
		e := newEnv(t, 0)
		s1, s2 := e.open(), e.open()
		addTrio(t, s1)
		if sw := usageLimited(t, s1, "a", time.Hour, true); !sw.Switched {
			t.Fatalf("UsageLimited(a) = %+v", sw)
		}
		for range 6 {
			if id := pickID(t, s2, "p"); id == "a" {
				t.Fatalf("the other instance picked the blocked a")
			}
		}
		if i := infoOf(t, s2, "p", "a"); i.Status != StatusBlocked {
			t.Errorf("a on the other instance = %+v; want blocked", i)
		}
	})

	t.Run("ConcurrentPickersAndBlockers", func(t *testing.T) {
		e := newEnv(t, 0)
		stores := []Store{e.open(), e.open()}
		const n = 8 // credentials c0..c7; c6 and c7 are never blocked
		for i := range n {
			mustAdd(t, stores[0], Credential{ID: fmt.Sprintf("c%d", i), Provider: "p", Secret: fmt.Sprintf("secret-c%d", i)})
		}
		// seq orders events across goroutines: a pick that started after a
		// block returned must not return the blocked credential.
		var seq atomic.Int64
		var blockedAt [n]atomic.Int64
		for i := range blockedAt {
			blockedAt[i].Store(1 << 62)
		}
		ctx := testkit.Context(t)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 6 {
			wg.Go(func() {
				id := g
				s := stores[g%2]
				if _, err := s.UsageLimited(ctx, "", "p", fmt.Sprintf("c%d", id), time.Hour, true, "limit"); err != nil {
					errs <- err
					return
				}
				blockedAt[id].Store(seq.Add(1))
			})
		}
		for g := range 8 {
			wg.Go(func() {
				s := stores[g%2]
				for range 100 {
					start := seq.Add(1)
					c, ok, err := s.Pick(ctx, "", "p")
					if err != nil || !ok {
						errs <- fmt.Errorf("Pick = %t, %v", ok, err)
						return
					}
					var i int
					if _, err := fmt.Sscanf(c.ID, "c%d", &i); err != nil || c.Secret != "secret-"+c.ID {
						errs <- fmt.Errorf("Pick = %s with a wrong secret", c.ID)
						return
					}
					if start > blockedAt[i].Load() {
						errs <- fmt.Errorf("picked %s after its block", c.ID)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i := range 6 {
			if in := infoOf(t, stores[1], "p", fmt.Sprintf("c%d", i)); in.Status != StatusBlocked {
				t.Errorf("c%d = %+v; want blocked", i, in)
			}
		}
	})

	t.Run("ConcurrentRedeemsSpendOneReset", func(t *testing.T) {
		e := newEnv(t, 0)
		stores := []Store{e.open(), e.open()}
		mustAdd(t, stores[0], Credential{ID: "a", Provider: "p", Secret: "secret-a", BankedResets: 1, AutoRedeem: true})
		mustAdd(t, stores[0], Credential{ID: "b", Provider: "p", Secret: "secret-b"})
		usageLimited(t, stores[0], "b", time.Hour, true)
		ctx := testkit.Context(t)
		var redeemed, switched atomic.Int32
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				sw, err := stores[g%2].UsageLimited(ctx, "", "p", "a", time.Hour, true, "limit")
				if err != nil {
					t.Error(err)
				}
				if sw.Redeemed {
					redeemed.Add(1)
				}
				if sw.Switched {
					switched.Add(1)
				}
			})
		}
		wg.Wait()
		if redeemed.Load() != 1 || switched.Load() != 1 {
			t.Errorf("16 racing UsageLimited(a): %d redeems, %d switches; want exactly 1", redeemed.Load(), switched.Load())
		}
		if i := infoOf(t, stores[1], "p", "a"); i.BankedResets != 0 {
			t.Errorf("a = %+v; want 0 banked", i)
		}
	})
	t.Run("Accounts", func(t *testing.T) { runAccounts(t, newEnv) })
	t.Run("Ownership", func(t *testing.T) { runOwnership(t, newEnv) })
}

// runAccounts: a credential's account is stored, listed as given, and
// comes with every credential Pick and UsageLimited hand out (its ID when
// it names none); a configuration credential added again takes its new
// account; a tenant's own credentials carry theirs.
func runAccounts(t *testing.T, newEnv newEnvFunc) {
	e := newEnv(t, 0)
	s, other := e.open(), e.open()
	mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a", Account: "acme"})
	mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b", Account: "acme"})
	mustAdd(t, s, Credential{ID: "c", Provider: "p", Secret: "secret-c"})
	var got []string
	for range 3 {
		c, ok, err := other.Pick(testkit.Context(t), "", "p")
		if err != nil || !ok {
			t.Fatalf("Pick = %v, %v", ok, err)
		}
		got = append(got, c.ID+"="+c.Account)
	}
	if g := strings.Join(got, ","); g != "a=acme,b=acme,c=c" {
		t.Errorf("picks = %s, want a=acme,b=acme,c=c", g)
	}
	if i := infoOf(t, other, "p", "a"); i.Account != "acme" {
		t.Errorf("a = %+v; want account acme", i)
	}
	if i := infoOf(t, other, "p", "c"); i.Account != "" {
		t.Errorf("c = %+v; want no account", i)
	}
	// The switch of a usage limit carries the sibling's account.
	if sw := usageLimited(t, other, "a", time.Hour, true); !sw.Switched || sw.To.ID != "b" || sw.To.Account != "acme" {
		t.Errorf("UsageLimited(a) = %+v; want a switch to b of acme", sw)
	}
	if sw := usageLimited(t, s, "b", time.Hour, true); !sw.Switched || sw.To.ID != "c" || sw.To.Account != "c" {
		t.Errorf("UsageLimited(b) = %+v; want a switch to c, its own account", sw)
	}
	// A redeem too.
	mustAdd(t, s, Credential{ID: "r", Provider: "q", Secret: "secret-r", Account: "org-r", BankedResets: 1, AutoRedeem: true})
	if sw, err := other.UsageLimited(testkit.Context(t), "", "q", "r", time.Hour, true, "limit"); err != nil || !sw.Redeemed || sw.To.Account != "org-r" {
		t.Errorf("UsageLimited(r) = %+v, %v; want a redeem of r of org-r", sw, err)
	}
	// A configuration credential added again takes its new account.
	for _, acct := range []string{"one", "two", ""} {
		if i := mustAdd(t, s, Credential{ID: "cfg", Provider: "k", Secret: "secret-cfg", Source: SourceConfig, Account: acct}); i.Account != acct {
			t.Errorf("Add(cfg, %q) = %+v", acct, i)
		}
		c, _, err := other.Pick(testkit.Context(t), "", "k")
		if want := cmp.Or(acct, "cfg"); err != nil || c.Account != want {
			t.Errorf("Pick(k) = %v, %v; want account %s", c, err, want)
		}
	}
	// A tenant's own.
	mustAdd(t, s, Credential{ID: "own", Provider: "p", Secret: "secret-own", Owner: "t1", Account: "t1-org"})
	if c, _, err := other.Pick(testkit.Context(t), "t1", "p"); err != nil || c.ID != "own" || c.Account != "t1-org" {
		t.Errorf("Pick(t1) = %v, %v; want own of t1-org", c, err)
	}
	if _, err := s.Add(testkit.Context(t), Credential{ID: "bad", Provider: "p", Secret: "x", Account: "a\nb"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Add with a control character in the account = %v; want ErrInvalid", err)
	}
}

func TestMemoryConformance(t *testing.T) {
	runConformance(t, func(t *testing.T, redeemMin time.Duration) env {
		clk := testkit.NewClock(time.Now())
		m := NewMemory(MemoryOptions{Now: clk.Now, RedeemMinBlocked: redeemMin, MaxPerOwner: testMaxPerOwner})
		return env{clk: clk, open: func() Store { return m }}
	})
}
