package retry

import (
	"math/rand/v2"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
)

// accountNearRateLimit must decide exactly as the reference's regexp.
func TestAccountNearRateLimitMatchesTheReferenceRegexp(t *testing.T) {
	ref := regexp.MustCompile(`\baccount(?:'s)?\b[^\n]{0,80}\brate.?limit\b|\brate.?limit\b[^\n]{0,80}\baccount\b`)
	pieces := []string{"account", "account's", "accounts", "my account", "rate limit", "rate-limit", "ratelimit",
		"rate_limit", "ratelimits", "xrate limit", "rate limited", "\n", " ", "x", strings.Repeat("y", 40),
		"/account/rate-limits", "'s", "rate\nlimit", "_account", "limit", "rate"}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		var b strings.Builder
		for range 1 + r.IntN(6) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		s := b.String()
		if got, want := accountNearRateLimit(s), ref.MatchString(s); got != want {
			t.Fatalf("case %d: accountNearRateLimit(%q) = %v, the reference regexp says %v", i, s, got, want)
		}
	}
}

// The prefilter never rejects a text the regexp matches.
func TestGuardNeverRejectsAMatch(t *testing.T) {
	for _, p := range []string{`\brate.?limit\b`, `(?:prompt|input).*(?:too long|too large)`, `try again in\s+(\d+)`,
		`\b(?:tpm|rpm)\b`, `x{2,}yz`, `a|b`, `(?i)Hello`, `[0-9]+ms`} {
		g := guard(p)
		for _, s := range []string{"rate limit", "ratelimit", "prompt is too long", "input too large", "try again in 5",
			"tpm", "rpm", "xxyz", "a", "b", "HELLO", "hello", "500ms", "nothing here"} {
			if g.Regexp.MatchString(s) && !g.mayMatch(s) {
				t.Errorf("guard(%q) rejects %q, which matches (literals %q)", p, s, g.lits)
			}
		}
	}
	// Case-folded patterns get no prefilter.
	if tree, _ := syntax.Parse(`(?i)hello`, syntax.Perl); requiredLiterals(tree.Simplify()) != nil {
		t.Error("a case-folded literal was used as a prefilter")
	}
}
