package retry

import (
	"regexp"
	"regexp/syntax"
	"strings"
)

// guardedRE is a regexp with a cheap prefilter: literals of which every
// match must contain at least one. Most patterns cannot match most
// messages, and strings.Contains rejects those far faster than the regexp
// engine, which cannot skip ahead on patterns that start with \b, a class
// or an alternation.
type guardedRE struct {
	*regexp.Regexp
	lits []string // nil: no prefilter
}

// guard compiles pattern with its prefilter.
func guard(pattern string) guardedRE {
	g := guardedRE{Regexp: regexp.MustCompile(pattern)}
	if tree, err := syntax.Parse(pattern, syntax.Perl); err == nil {
		g.lits = requiredLiterals(tree.Simplify())
	}
	return g
}

// mayMatch reports whether s contains one of the required literals (true
// when there is no prefilter).
func (g guardedRE) mayMatch(s string) bool {
	if g.lits == nil {
		return true
	}
	for _, l := range g.lits {
		if strings.Contains(s, l) {
			return true
		}
	}
	return false
}

// MatchString is regexp's, prefiltered.
func (g guardedRE) MatchString(s string) bool { return g.mayMatch(s) && g.Regexp.MatchString(s) }

// FindStringIndex is regexp's, prefiltered.
func (g guardedRE) FindStringIndex(s string) []int {
	if !g.mayMatch(s) {
		return nil
	}
	return g.Regexp.FindStringIndex(s)
}

// FindStringSubmatch is regexp's, prefiltered.
func (g guardedRE) FindStringSubmatch(s string) []string {
	if !g.mayMatch(s) {
		return nil
	}
	return g.Regexp.FindStringSubmatch(s)
}

// FindAllStringIndex is regexp's, prefiltered.
func (g guardedRE) FindAllStringIndex(s string, n int) [][]int {
	if !g.mayMatch(s) {
		return nil
	}
	return g.Regexp.FindAllStringIndex(s, n)
}

// requiredLiterals returns literals of which every match of re contains at
// least one, or nil when it cannot tell. Case-folded literals give up (the
// text is not known to be lower case).
func requiredLiterals(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil
		}
		return []string{string(re.Rune)}
	case syntax.OpCapture, syntax.OpPlus:
		return requiredLiterals(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return requiredLiterals(re.Sub[0])
		}
		return nil
	case syntax.OpConcat:
		// Every part must match: the part whose literals are most selective
		// (the longest shortest literal) guards the whole.
		var best []string
		bestLen := 0
		for _, sub := range re.Sub {
			lits := requiredLiterals(sub)
			if lits == nil {
				continue
			}
			if n := shortest(lits); n > bestLen {
				best, bestLen = lits, n
			}
		}
		return best
	case syntax.OpAlternate:
		// One of the branches matches: every branch must be guarded.
		var all []string
		for _, sub := range re.Sub {
			lits := requiredLiterals(sub)
			if lits == nil {
				return nil
			}
			all = append(all, lits...)
		}
		return all
	default:
		return nil
	}
}

func shortest(lits []string) int {
	n := -1
	for _, l := range lits {
		if n < 0 || len(l) < n {
			n = len(l)
		}
	}
	return n
}
