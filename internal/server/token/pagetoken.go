package token

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Page tokens (ListSessions, ListMessages) are opaque and bound to their
// caller: the session engine's position ("o<creation order>", "m<offset>")
// is sealed with AES-256-GCM under a key derived from the server's ticket
// key, the tenant and the listing as associated data. A token shows nothing
// of the position (no other tenant's activity can be read from a creation
// counter), cannot be forged or altered, and is refused for another tenant
// or listing. With http.ticket_key_env every replica accepts every other's
// tokens; without it they hold for this process.
const pageTokenPrefix = "p1."

// Pages seals and opens page tokens (Tickets.Pages makes them).
type Pages struct{ aead cipher.AEAD }

func newPages(ticketKey []byte) *Pages {
	m := hmac.New(sha256.New, ticketKey)
	m.Write([]byte("agentd page tokens"))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &Pages{aead: aead}
}

func pageScope(tenant, listing string) []byte {
	return []byte(tenant + "\x00" + listing)
}

// Seal makes raw (non-empty) a token for tenant's listing; "" stays "".
func (p *Pages) Seal(tenant, listing, raw string) string {
	if raw == "" {
		return ""
	}
	nonce := make([]byte, p.aead.NonceSize(), p.aead.NonceSize()+len(raw)+p.aead.Overhead())
	rand.Read(nonce) // never fails (crypto/rand)
	out := p.aead.Seal(nonce, nonce, []byte(raw), pageScope(tenant, listing))
	return pageTokenPrefix + base64.RawURLEncoding.EncodeToString(out)
}

// Open returns the position of a token sealed for tenant's listing; ok is
// false for anything else.
func (p *Pages) Open(tenant, listing, token string) (raw string, ok bool) {
	body, found := strings.CutPrefix(token, pageTokenPrefix)
	if !found || len(body) > 512 {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(b) < p.aead.NonceSize() {
		return "", false
	}
	plain, err := p.aead.Open(nil, b[:p.aead.NonceSize()], b[p.aead.NonceSize():], pageScope(tenant, listing))
	if err != nil {
		return "", false
	}
	return string(plain), true
}
