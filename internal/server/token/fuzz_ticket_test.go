package token

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

// The stream-ticket fuzzer: forged and mutated tickets never verify, and
// never as another tenant or session; nothing panics. Run it with
//
//	go test -run '^$' -fuzz '^FuzzStreamTicket$' -fuzztime 10m ./internal/server/token/
//
// (FuzzStreamGrant, which takes grants to the auth interceptor too, is
// package server's.)

// fuzzTicketKey and fuzzTicketNow make the fuzzed authority's tickets the
// same in every process, so that valid tickets can be seeds.
var (
	fuzzTicketKey = strings.Repeat("k", 32)
	fuzzTicketNow = time.UnixMilli(1_800_000_000_000)
)

// fuzzTicketAuthority is the authority whose tickets FuzzStreamTicket
// forges.
func fuzzTicketAuthority() *Tickets {
	return NewTickets(fuzzTicketKey, time.Minute, func() time.Time { return fuzzTicketNow })
}

// encodeTicket is Mint's encoding of p, with the nonce and expiry given.
func encodeTicket(ta *Tickets, p ticketPayload) string {
	body, _ := json.Marshal(p)
	payload := base64.RawURLEncoding.EncodeToString(body)
	return ticketPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(ta.mac(payload))
}

// fuzzTickets are the tickets fuzzTicketAuthority signed.
var fuzzTickets = []ticketPayload{
	{Tenant: "team-a", Session: "ses_1", Expiry: fuzzTicketNow.Add(time.Minute).UnixMilli(), Nonce: "bm9uY2Ux"},
	{Tenant: "team-b", Session: "ses_2", Expiry: fuzzTicketNow.Add(time.Hour).UnixMilli(), Nonce: "bm9uY2Uy"},
	{Tenant: "team-a", Session: "ses_3", Expiry: fuzzTicketNow.UnixMilli(), Nonce: "ZXhwaXJlZA"}, // expired
	{Tenant: "t.e_a-m", Session: "ses_aaaaaaaaaaaaaaaaaaaaaaaaaa", Expiry: fuzzTicketNow.Add(time.Millisecond).UnixMilli()},
}

// FuzzStreamTicket checks verify on any ticket for any session, and on the
// edits of a freshly minted one: only a ticket the authority signed
// verifies, unchanged, for its own session, as its own tenant, before its
// expiry.
func FuzzStreamTicket(f *testing.F) {
	ta := fuzzTicketAuthority()
	signed := map[string]ticketPayload{}
	for _, p := range fuzzTickets {
		tk := encodeTicket(ta, p)
		signed[tk] = p
		f.Add(tk, p.Session, []byte{})
		f.Add(tk, "ses_9", []byte{0, 200, 'A'})
		payload, sig, _ := strings.Cut(strings.TrimPrefix(tk, ticketPrefix), ".")
		f.Add(ticketPrefix+payload+"."+sig+"A", p.Session, []byte{2, 255, 0})
		f.Add(ticketPrefix+payload+"\n."+sig, p.Session, []byte{1, 40, '\n'})
		f.Add(ticketPrefix+payload+".."+sig, p.Session, []byte{1, 0, '.'})
		// The same MAC in other spellings: a line break inside, another
		// unused trailing bit.
		f.Add(ticketPrefix+payload+"."+sig[:10]+"\r\n"+sig[10:], p.Session, []byte{1, 120, '\r'})
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		last := strings.IndexByte(alphabet, sig[len(sig)-1])
		f.Add(ticketPrefix+payload+"."+sig[:len(sig)-1]+alphabet[last^1:last^1+1], p.Session, []byte{0, 255, alphabet[last^1]})
	}
	// A minted ticket verifies, and is what encodeTicket makes.
	if live, _ := ta.Mint("team-a", "ses_1"); !strings.HasPrefix(live, ticketPrefix) {
		f.Fatalf("mint = %q", live)
	} else if tenant, err := ta.Verify(live, "ses_1"); err != nil || tenant != "team-a" {
		f.Fatalf("verify(mint) = %q, %v", tenant, err)
	}
	for _, s := range []string{"", "v1.", "v1..", "v2.e30.AAAA", "v1.e30.", "v1.bnVsbA.x", "v1.e30=.AAAA", "v1.!!!.???",
		"v1." + base64.RawURLEncoding.EncodeToString([]byte(`{"t":"team-a","s":"ses_1","e":9999999999999}`)) + "." + strings.Repeat("A", 43)} {
		f.Add(s, "ses_1", []byte{})
	}
	other := NewTickets(strings.Repeat("o", 32), time.Minute, ta.now)

	f.Fuzz(func(t *testing.T, ticket, sessionID string, edits []byte) {
		tenant, err := ta.Verify(ticket, sessionID)
		p, isSigned := signed[ticket]
		switch {
		case err == nil:
			if !isSigned {
				t.Fatalf("verify(%q, %q): a ticket the authority never signed verified as %q", ticket, sessionID, tenant)
			}
			if tenant != p.Tenant || sessionID != p.Session || !fuzzTicketNow.Before(time.UnixMilli(p.Expiry)) {
				t.Fatalf("verify(%q, %q) = %q: the ticket is for %+v", ticket, sessionID, tenant, p)
			}
		case errors.Is(err, ErrTicketExpired), errors.Is(err, ErrTicketSession):
			// These come after the MAC check: only a signed ticket gets them.
			if !isSigned {
				t.Fatalf("verify(%q, %q) = %v: a ticket the authority never signed passed the MAC check", ticket, sessionID, err)
			}
		case !errors.Is(err, ErrTicketInvalid):
			t.Fatalf("verify(%q, %q): unexpected error %v", ticket, sessionID, err)
		}
		if tenant, err := other.Verify(ticket, sessionID); err == nil {
			t.Fatalf("verify(%q, %q) under another key = %q", ticket, sessionID, tenant)
		}

		// A mutated fresh ticket verifies only unchanged, and never for
		// another session.
		fresh, _ := ta.Mint("team-a", "ses_1")
		mutated := testkit.Edit(fresh, edits)
		for _, sid := range []string{"ses_1", sessionID} {
			tenant, err := ta.Verify(mutated, sid)
			if err != nil {
				continue
			}
			if mutated != fresh {
				t.Fatalf("a mutated ticket verified: %q (minted %q) for %q as %q", mutated, fresh, sid, tenant)
			}
			if sid != "ses_1" || tenant != "team-a" {
				t.Fatalf("the ticket of team-a's ses_1 verified for %q as %q", sid, tenant)
			}
		}
	})
}
