// Package token makes and checks the server's cryptographic tokens: stream
// tickets (Tickets), the grants the HTTP face hands the gRPC layer for a
// checked ticket (MakeGrant, ParseGrant), and opaque page tokens (Pages).
// It knows nothing of the services that hand them out or take them.
package token

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// Stream tickets let a browser's EventSource, which cannot send an
// authorization header, read one session's events:
//
//   - CreateStreamTicket (POST /v1/sessions/{id}:streamTicket, normal auth)
//     mints "v1.<payload>.<mac>": the payload names the tenant, the session
//     and the expiry; the MAC is HMAC-SHA256 under the server's ticket key
//     (http.ticket_key_env, else a random key of this process).
//   - The HTTP face accepts "?ticket=" on GET /v1/sessions/{id}/events only:
//     it checks the MAC, the expiry and the session, removes the ticket from
//     the URL (so it reaches no log), and hands the gateway's gRPC call a
//     grant: metadata "x-agentd-stream-grant" naming the tenant and the
//     session, MACed with a secret that never leaves this process.
//   - The gRPC auth interceptor accepts a grant instead of a bearer token on
//     StreamEvents only, and only for the session it names. A client that
//     sends its own grant metadata cannot forge its MAC.

const ticketPrefix = "v1."

const (
	// GrantKey is the metadata key of a grant.
	GrantKey = "x-agentd-stream-grant"
	// GrantTTL is how long a grant holds.
	GrantTTL = time.Minute
)

// Verify's errors.
var (
	ErrTicketInvalid = errors.New("invalid stream ticket")
	ErrTicketExpired = errors.New("stream ticket expired (create another: POST /v1/sessions/{session_id}:streamTicket)")
	ErrTicketSession = errors.New("stream ticket is for another session")
)

// Tickets mints and checks stream tickets.
type Tickets struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

type ticketPayload struct {
	Tenant  string `json:"t"`
	Session string `json:"s"`
	Expiry  int64  `json:"e"` // unix milliseconds
	Nonce   string `json:"n"`
}

// NewTickets returns the authority of tickets MACed under key (a random key
// of this process when it is empty) that hold for ttl by the clock now.
func NewTickets(key string, ttl time.Duration, now func() time.Time) *Tickets {
	k := []byte(key)
	if len(k) == 0 {
		k = make([]byte, 32)
		rand.Read(k) // never fails (crypto/rand)
	}
	return &Tickets{key: k, ttl: ttl, now: now}
}

func (t *Tickets) mac(payload string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte("agentd stream ticket\x00" + payload))
	return m.Sum(nil)
}

// Mint returns a ticket for tenant's session and its expiry.
func (t *Tickets) Mint(tenant, sessionID string) (string, time.Time) {
	exp := t.now().Add(t.ttl)
	nonce := make([]byte, 9)
	rand.Read(nonce)
	body, _ := json.Marshal(ticketPayload{Tenant: tenant, Session: sessionID, Expiry: exp.UnixMilli(),
		Nonce: base64.RawURLEncoding.EncodeToString(nonce)})
	payload := base64.RawURLEncoding.EncodeToString(body)
	return ticketPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(t.mac(payload)), exp
}

// Verify checks a ticket for sessionID and returns its tenant; the error is
// ErrTicketInvalid, ErrTicketExpired or ErrTicketSession.
func (t *Tickets) Verify(ticket, sessionID string) (string, error) {
	rest, ok := strings.CutPrefix(ticket, ticketPrefix)
	if !ok {
		return "", ErrTicketInvalid
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return "", ErrTicketInvalid
	}
	// The MAC as Mint wrote it, byte for byte: base64's decoder would also
	// take other spellings of it (a line break inside, other trailing
	// bits), so that edited tickets would pass.
	if !hmac.Equal([]byte(sig), []byte(base64.RawURLEncoding.EncodeToString(t.mac(payload)))) {
		return "", ErrTicketInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", ErrTicketInvalid
	}
	var p ticketPayload
	if err := json.Unmarshal(body, &p); err != nil || p.Tenant == "" || p.Session == "" {
		return "", ErrTicketInvalid
	}
	if !t.now().Before(time.UnixMilli(p.Expiry)) {
		return "", ErrTicketExpired
	}
	if p.Session != sessionID {
		return "", ErrTicketSession
	}
	return p.Tenant, nil
}

// grantSecret authenticates the grants the HTTP face hands the gRPC layer.
// It is random per process and never leaves it.
var grantSecret = func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}()

func grantMAC(tenant, sessionID string, exp int64) string {
	m := hmac.New(sha256.New, grantSecret)
	body, _ := json.Marshal([]any{"agentd stream grant", tenant, sessionID, exp})
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// MakeGrant is the metadata value (GrantKey) that lets the gateway's
// StreamEvents call read sessionID as tenant.
func MakeGrant(tenant, sessionID string) string {
	exp := time.Now().Add(GrantTTL).UnixMilli()
	body, _ := json.Marshal(ticketPayload{Tenant: tenant, Session: sessionID, Expiry: exp})
	return base64.RawURLEncoding.EncodeToString(body) + "." + grantMAC(tenant, sessionID, exp)
}

// ParseGrant checks a grant MakeGrant made, at now, and returns its tenant
// and session.
func ParseGrant(v string, now time.Time) (tenant, sessionID string, err error) {
	payload, sig, ok := strings.Cut(v, ".")
	if !ok {
		return "", "", errors.New("malformed stream grant")
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", "", errors.New("malformed stream grant")
	}
	var p ticketPayload
	if err := json.Unmarshal(body, &p); err != nil || p.Tenant == "" || p.Session == "" {
		return "", "", errors.New("malformed stream grant")
	}
	if !hmac.Equal([]byte(sig), []byte(grantMAC(p.Tenant, p.Session, p.Expiry))) {
		return "", "", errors.New("invalid stream grant")
	}
	if !now.Before(time.UnixMilli(p.Expiry)) {
		return "", "", errors.New("stream grant expired")
	}
	return p.Tenant, p.Session, nil
}

// Pages returns the page tokens of t's key (see Pages).
func (t *Tickets) Pages() *Pages { return newPages(t.key) }
