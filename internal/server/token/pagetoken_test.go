package token

import (
	"strings"
	"testing"
	"time"
)

// A page token opens for the tenant and listing it was sealed for only,
// shows nothing of its position, and cannot be altered; the same ticket key
// opens another authority's tokens.
func TestPages(t *testing.T) {
	now := func() time.Time { return time.Unix(1_800_000_000, 0) }
	p := NewTickets(strings.Repeat("k", 32), time.Minute, now).Pages()
	if got := p.Seal("team-a", "sessions", ""); got != "" {
		t.Fatalf(`Seal("") = %q`, got)
	}
	tok := p.Seal("team-a", "sessions", "o42")
	if !strings.HasPrefix(tok, pageTokenPrefix) || strings.Contains(tok, "o42") {
		t.Fatalf("token %q", tok)
	}
	if again := p.Seal("team-a", "sessions", "o42"); again == tok {
		t.Fatal("tokens of the same position repeat")
	}
	if raw, ok := p.Open("team-a", "sessions", tok); !ok || raw != "o42" {
		t.Fatalf("Open = %q, %v", raw, ok)
	}
	if raw, ok := NewTickets(strings.Repeat("k", 32), time.Minute, now).Pages().Open("team-a", "sessions", tok); !ok || raw != "o42" {
		t.Fatalf("the same key: Open = %q, %v", raw, ok)
	}
	// An edit inside (not of the last character, whose unused bits base64
	// ignores).
	edited := []byte(tok)
	edited[len(pageTokenPrefix)+10] ^= 'A' ^ 'B'
	for name, open := range map[string]func() (string, bool){
		"another tenant":  func() (string, bool) { return p.Open("team-b", "sessions", tok) },
		"another listing": func() (string, bool) { return p.Open("team-a", "messages/ses_1", tok) },
		"another key":     func() (string, bool) { return NewTickets("", time.Minute, now).Pages().Open("team-a", "sessions", tok) },
		"edited":          func() (string, bool) { return p.Open("team-a", "sessions", string(edited)) },
		"no prefix":       func() (string, bool) { return p.Open("team-a", "sessions", strings.TrimPrefix(tok, pageTokenPrefix)) },
		"too long":        func() (string, bool) { return p.Open("team-a", "sessions", pageTokenPrefix+strings.Repeat("A", 600)) },
		"short":           func() (string, bool) { return p.Open("team-a", "sessions", pageTokenPrefix+"AAAA") },
		"not base64":      func() (string, bool) { return p.Open("team-a", "sessions", pageTokenPrefix+"!!") },
	} {
		if raw, ok := open(); ok {
			t.Fatalf("%s: opened as %q", name, raw)
		}
	}
}
