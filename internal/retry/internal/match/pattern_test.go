package match

import (
	"regexp/syntax"
	"testing"
)

// The prefilter never rejects a text the regexp matches.
func TestGuardNeverRejectsAMatch(t *testing.T) {
	for _, p := range []string{`\brate.?limit\b`, `(?:prompt|input).*(?:too long|too large)`, `try again in\s+(\d+)`,
		`\b(?:tpm|rpm)\b`, `x{2,}yz`, `a|b`, `(?i)Hello`, `[0-9]+ms`} {
		g := Compile(p)
		for _, s := range []string{"rate limit", "ratelimit", "prompt is too long", "input too large", "try again in 5",
			"tpm", "rpm", "xxyz", "a", "b", "HELLO", "hello", "500ms", "nothing here"} {
			if g.Regexp.MatchString(s) && !g.MayMatch(s) {
				t.Errorf("Compile(%q) rejects %q, which matches (literals %q)", p, s, g.lits)
			}
		}
	}
	// Case-folded patterns get no prefilter.
	if tree, _ := syntax.Parse(`(?i)hello`, syntax.Perl); requiredLiterals(tree.Simplify()) != nil {
		t.Error("a case-folded literal was used as a prefilter")
	}
}
