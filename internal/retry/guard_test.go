package retry

import (
	"math/rand/v2"
	"regexp"
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
