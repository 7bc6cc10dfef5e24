package token

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTicketAuthority(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	ta := NewTickets("", time.Minute, clock)
	ticket, exp := ta.Mint("team-a", "ses_1")
	if !exp.Equal(now.Add(time.Minute)) {
		t.Fatalf("expiry %v", exp)
	}
	if tenant, err := ta.Verify(ticket, "ses_1"); err != nil || tenant != "team-a" {
		t.Fatalf("verify = %q, %v", tenant, err)
	}
	if _, err := ta.Verify(ticket, "ses_2"); !errors.Is(err, ErrTicketSession) {
		t.Fatalf("wrong session: %v", err)
	}
	// Another process (another random key) refuses it; the same shared key
	// accepts it.
	if _, err := NewTickets("", time.Minute, clock).Verify(ticket, "ses_1"); !errors.Is(err, ErrTicketInvalid) {
		t.Fatalf("other key: %v", err)
	}
	k := strings.Repeat("s", 32)
	shared, _ := NewTickets(k, time.Minute, clock).Mint("team-a", "ses_1")
	if _, err := NewTickets(k, time.Minute, clock).Verify(shared, "ses_1"); err != nil {
		t.Fatalf("shared key: %v", err)
	}

	// Rewriting the payload (another tenant, a later expiry) breaks the MAC.
	payload, sig, _ := strings.Cut(strings.TrimPrefix(ticket, ticketPrefix), ".")
	body, _ := base64.RawURLEncoding.DecodeString(payload)
	var p ticketPayload
	json.Unmarshal(body, &p)
	for _, edit := range []func(*ticketPayload){
		func(p *ticketPayload) { p.Tenant = "team-b" },
		func(p *ticketPayload) { p.Expiry += 3600_000 },
		func(p *ticketPayload) { p.Session = "ses_2" },
	} {
		q := p
		edit(&q)
		b, _ := json.Marshal(q)
		forged := ticketPrefix + base64.RawURLEncoding.EncodeToString(b) + "." + sig
		if _, err := ta.Verify(forged, q.Session); !errors.Is(err, ErrTicketInvalid) {
			t.Fatalf("forged %+v: %v", q, err)
		}
	}

	// Expiry: valid until the last millisecond before expire_time.
	now = exp.Add(-time.Millisecond)
	if _, err := ta.Verify(ticket, "ses_1"); err != nil {
		t.Fatalf("just before expiry: %v", err)
	}
	now = exp
	if _, err := ta.Verify(ticket, "ses_1"); !errors.Is(err, ErrTicketExpired) {
		t.Fatalf("at expiry: %v", err)
	}
	// Two tickets for the same session differ.
	now = exp
	a, _ := ta.Mint("team-a", "ses_1")
	b, _ := ta.Mint("team-a", "ses_1")
	if a == b {
		t.Fatal("tickets repeat")
	}
}

func TestGrants(t *testing.T) {
	g := MakeGrant("team-a", "ses_1")
	if tenant, sid, err := ParseGrant(g, time.Now()); err != nil || tenant != "team-a" || sid != "ses_1" {
		t.Fatalf("ParseGrant = %q %q %v", tenant, sid, err)
	}
	if _, _, err := ParseGrant(g, time.Now().Add(GrantTTL)); err == nil {
		t.Fatal("an expired grant passed")
	}
	payload, sig, _ := strings.Cut(g, ".")
	body, _ := base64.RawURLEncoding.DecodeString(payload)
	forged := strings.Replace(string(body), "team-a", "team-b", 1)
	for _, bad := range []string{
		base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + sig,
		payload + "." + strings.Repeat("A", len(sig)),
		payload, "", ".",
	} {
		if _, _, err := ParseGrant(bad, time.Now()); err == nil {
			t.Fatalf("forged grant %q passed", bad)
		}
	}
}
