package match

import (
	"regexp"
	"regexp/syntax"
	"strings"
)

// Pattern is a regexp with the means to avoid running it, or to run it
// only where a match can start:
//
//   - a prefilter: literals every match must contain. Most patterns cannot
//     match most messages, and a literal check rejects those far faster than
//     the regexp engine, which cannot skip ahead on patterns that start with
//     \b, a class or an alternation. On a scanned Subject (see literals.go)
//     the check is a few bit tests, and it is a conjunction: every part of a
//     concatenation must match, so each part's literals are required.
//   - candidate starts: literals every match begins with (after a leading \b,
//     which is checked by hand). Go's regexp engine skips ahead only to a
//     literal prefix; without one it tries every position of the text, which
//     costs tens of µs on a message of a few hundred bytes. With starts, the
//     regexp runs anchored (as ^(?:…)) at the occurrences of the starts only.
//
// Matching through the Subject methods (FindIn, FindWordIn, FindSubmatchIn,
// EachMatchIn) is exactly the regexp's leftmost-first matching on the whole
// text; differential_test.go checks it against the plain regexp.
type Pattern struct {
	Regexp *regexp.Regexp
	lits   []string // one set of required literals (nil: no prefilter); for MayMatch

	// clauses: every match contains at least one literal of each clause
	// (ids in the literal index). Empty: no prefilter through the index.
	// seq is the pattern's number in the index (-1: none), which tells the
	// first clause from a scanned Subject's candidates.
	clauses [][]int
	seq     int

	// starts: every match begins with one of these literals, right after a
	// word boundary when wordStart (the pattern's leading \b). nil: unknown,
	// the plain regexp runs. startIDs are their ids in the literal index
	// (-1: not indexed), for the longer starts of patterns with several: a
	// scanned Subject then says which starts are worth looking for.
	starts    []string
	startIDs  []int
	wordStart bool
	// literal is the pattern itself when it is a plain literal that the
	// index holds: on a scanned Subject the prefilter is then the answer.
	literal string
	// anchored is ^(?:pattern): the match starting at a candidate position.
	// nil when the pattern is a plain literal (then the match is the literal
	// itself).
	anchored *regexp.Regexp
}

// maxStarts bounds the candidate-start literals of one pattern (they are
// searched for side by side).
const maxStarts = 8

// minIndexedStart is the length from which a start literal goes into the
// literal index: short ones are too common to be worth it.
const minIndexedStart = 5

// guard compiles pattern with its prefilter and candidate starts.
func Compile(pattern string) Pattern {
	g := Pattern{Regexp: regexp.MustCompile(pattern), seq: -1}
	tree, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return g
	}
	tree = tree.Simplify()
	g.lits = requiredLiterals(tree)
	g.clauses = indexedClauses(requiredClauses(tree))
	g.seq = literals.pattern(g.clauses)

	rest := tree
	if tree.Op == syntax.OpConcat && len(tree.Sub) > 1 && tree.Sub[0].Op == syntax.OpWordBoundary {
		g.wordStart = true
		rest = &syntax.Regexp{Op: syntax.OpConcat, Flags: tree.Flags, Sub: tree.Sub[1:]}
	}
	starts := leadingLiterals(rest)
	if len(starts) == 0 || len(starts) > maxStarts {
		return g
	}
	if g.wordStart {
		// The anchored regexp keeps the leading \b, which at the start of
		// its input holds exactly when the input begins with a word byte;
		// matchFrom checks the real boundary, in the whole text, itself.
		for _, s := range starts {
			if !isWordByte(s[0]) {
				return g
			}
		}
	}
	g.starts = starts
	g.startIDs = make([]int, len(starts))
	for i, s := range starts {
		g.startIDs[i] = -1
		if len(starts) == 1 || len(s) < minIndexedStart {
			continue
		}
		if id, ok := literals.id(s); ok {
			g.startIDs[i] = id
		}
	}
	if tree.Op != syntax.OpLiteral || tree.Flags&syntax.FoldCase != 0 {
		g.anchored = regexp.MustCompile(`^(?:` + pattern + `)`)
	} else if len(g.clauses) == 1 && len(g.clauses[0]) == 1 {
		g.literal = starts[0]
	}
	return g
}

// indexedClauses registers the clauses' literals in the literal index and
// returns their ids. A clause with a literal the index cannot hold is
// dropped (it would need a strings.Contains of its own).
func indexedClauses(clauses [][]string) [][]int {
	var out [][]int
	for _, c := range clauses {
		ids := make([]int, 0, len(c))
		for _, l := range c {
			id, ok := literals.id(l)
			if !ok {
				ids = nil
				break
			}
			ids = append(ids, id)
		}
		if ids != nil {
			out = append(out, ids)
		}
	}
	return out
}

// MayMatch reports whether s contains one of the required literals (true
// when there is no prefilter).
func (g *Pattern) MayMatch(s string) bool {
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

// Subject is a text to match, with the set of indexed literals it contains
// and the patterns whose first prefilter clause holds, when it was scanned.
type Subject struct {
	S       string // the text
	scanned bool
	found   litSet
	cands   patternSet
}

// scanned prepares s for many patterns: one pass of the literal index.
func Scanned(s string) Subject {
	if !literals.ready() {
		return Subject{S: s}
	}
	t := Subject{S: s, scanned: true, found: literals.scan(s)}
	t.cands = literals.candidates(&t.found)
	return t
}

// scannedSplit is scanned of words and lower, where words is lower with
// spaces inserted, in one pass.
func ScannedSplit(words, lower string) (w, l Subject) {
	if !literals.ready() {
		return Subject{S: words}, Subject{S: lower}
	}
	w = Subject{S: words, scanned: true}
	l = Subject{S: lower, scanned: true}
	w.found, l.found = literals.scanSplit(words, lower)
	w.cands, l.cands = literals.candidates(&w.found), literals.candidates(&l.found)
	return w, l
}

// MayMatchIn is the prefilter on t.
func (g *Pattern) MayMatchIn(t *Subject) bool {
	if !t.scanned {
		return g.MayMatch(t.S)
	}
	clauses := g.clauses
	if g.seq >= 0 {
		if !t.cands.has(g.seq) {
			return false
		}
		if len(clauses) > 0 {
			clauses = clauses[1:]
		}
	}
clauses:
	for _, c := range clauses {
		for _, id := range c {
			if t.found.has(id) {
				continue clauses
			}
		}
		return false
	}
	return true
}

// MatchIn reports whether g matches t.
func (g *Pattern) MatchIn(t *Subject) bool {
	if g.literal != "" && t.scanned {
		return g.MayMatchIn(t)
	}
	_, _, ok := g.FindIn(t)
	return ok
}

// FindIn returns the leftmost match of g in t.S.
func (g *Pattern) FindIn(t *Subject) (start, end int, ok bool) {
	if !g.MayMatchIn(t) {
		return 0, 0, false
	}
	if g.starts == nil {
		loc := g.Regexp.FindStringIndex(t.S)
		if loc == nil {
			return 0, 0, false
		}
		return loc[0], loc[1], true
	}
	return g.matchFrom(t, 0, nil)
}

// FindWordIn returns the leftmost match of g in t.S that starts at a leading
// word boundary (lead). The pattern must contain no ^ and no \b (see
// Phrases).
func (g *Pattern) FindWordIn(t *Subject) (start, end int, ok bool) {
	if !g.MayMatchIn(t) {
		return 0, 0, false
	}
	if g.starts != nil {
		return g.matchFrom(t, 0, Lead)
	}
	// Without ^ or \b, matching a suffix of s is sound: each search finds
	// the next position where a match starts.
	s := t.S
	for off := 0; off < len(s); {
		loc := g.Regexp.FindStringIndex(s[off:])
		if loc == nil {
			return 0, 0, false
		}
		start, end := off+loc[0], off+loc[1]
		if Lead(s, start) {
			return start, end, true
		}
		off = start + 1
	}
	return 0, 0, false
}

// FindSubmatchIn is regexp's FindStringSubmatch on t.S.
func (g *Pattern) FindSubmatchIn(t *Subject) []string {
	if !g.MayMatchIn(t) {
		return nil
	}
	if g.starts == nil || g.anchored == nil {
		return g.Regexp.FindStringSubmatch(t.S)
	}
	start, _, ok := g.matchFrom(t, 0, nil)
	if !ok {
		return nil
	}
	return g.anchored.FindStringSubmatch(t.S[start:])
}

// EachMatchIn calls fn with the successive non-overlapping matches of g in
// t.S, as regexp's FindAllStringIndex finds them, until fn returns true.
func (g *Pattern) EachMatchIn(t *Subject, fn func(start, end int) bool) {
	if !g.MayMatchIn(t) {
		return
	}
	if g.starts == nil {
		for _, loc := range g.Regexp.FindAllStringIndex(t.S, -1) {
			if fn(loc[0], loc[1]) {
				return
			}
		}
		return
	}
	for from := 0; from <= len(t.S); {
		start, end, ok := g.matchFrom(t, from, nil)
		if !ok || fn(start, end) {
			return
		}
		if end == start { // never for a pattern with starts; keeps the loop finite
			end++
		}
		from = end
	}
}

// matchFrom returns the leftmost match of g (which has starts) that starts at
// or after from, at a position accept allows (nil: any). Candidates are the
// occurrences of the start literals, in increasing order; at each, the
// anchored regexp decides on the rest of the text, so the context of every
// assertion after the start is the whole text's.
func (g *Pattern) matchFrom(t *Subject, from int, accept func(s string, i int) bool) (start, end int, ok bool) {
	s := t.S
	// next[i] is the next occurrence of starts[i] at or after pos; -1: none
	// left; below pos: to be searched.
	var next [maxStarts]int
	for i, id := range g.startIDs {
		next[i] = -2
		if id >= 0 && t.scanned && !t.found.has(id) {
			next[i] = -1
		}
	}
	for pos := from; pos <= len(s); {
		p := -1
		for i, lit := range g.starts {
			if next[i] == -1 {
				continue
			}
			if next[i] < pos {
				k := strings.Index(s[pos:], lit)
				if k < 0 {
					next[i] = -1
					continue
				}
				next[i] = pos + k
			}
			if p < 0 || next[i] < p {
				p = next[i]
			}
		}
		if p < 0 {
			return 0, 0, false
		}
		pos = p + 1
		if (g.wordStart && !Boundary(s, p)) || (accept != nil && !accept(s, p)) {
			continue
		}
		if g.anchored == nil {
			return p, p + len(g.starts[0]), true
		}
		if loc := g.anchored.FindStringIndex(s[p:]); loc != nil {
			return p, p + loc[1], true
		}
	}
	return 0, 0, false
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

// requiredClauses returns sets of literals such that every match of re
// contains at least one literal of each set: the required literals of every
// part of a concatenation (requiredLiterals keeps only the best one).
func requiredClauses(re *syntax.Regexp) [][]string {
	switch re.Op {
	case syntax.OpCapture, syntax.OpPlus:
		return requiredClauses(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return requiredClauses(re.Sub[0])
		}
		return nil
	case syntax.OpConcat:
		var all [][]string
		for _, sub := range re.Sub {
			all = append(all, requiredClauses(sub)...)
		}
		return all
	}
	if lits := requiredLiterals(re); lits != nil {
		return [][]string{lits}
	}
	return nil
}

// leadingLiterals returns literals one of which every match of re begins
// with, or nil when it cannot tell (a match may be empty, may begin with an
// assertion, a large class or a case-folded literal).
func leadingLiterals(re *syntax.Regexp) []string {
	lits, _ := leading(re)
	return lits
}

// leading is leadingLiterals; exact reports that each literal is a whole
// match of re, so that what follows re in a concatenation can extend it
// ("re(?:try|set)" begins with "retry" or "reset", not just "re").
func leading(re *syntax.Regexp) (lits []string, exact bool) {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 || len(re.Rune) == 0 {
			return nil, false
		}
		return []string{string(re.Rune)}, true
	case syntax.OpCharClass:
		// A small ASCII class: each of its bytes.
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if hi > 0x7f || hi-lo >= maxStarts {
				return nil, false
			}
			for r := lo; r <= hi; r++ {
				lits = append(lits, string(r))
			}
		}
		return lits, true
	case syntax.OpCapture:
		return leading(re.Sub[0])
	case syntax.OpPlus:
		lits, _ = leading(re.Sub[0])
		return lits, false
	case syntax.OpRepeat:
		if re.Min >= 1 {
			lits, _ = leading(re.Sub[0])
			return lits, false
		}
		return nil, false
	case syntax.OpConcat:
		// Optional leading parts (x?, x*, x{0,n}) add their own starts; the
		// first part that must match ends the list, extended by the starts
		// of the rest when it is exact and the product stays small.
		for i, sub := range re.Sub {
			if optional(sub) {
				l, _ := leading(sub.Sub[0])
				if l == nil {
					return nil, false
				}
				lits = append(lits, l...)
				continue
			}
			l, exact := leading(sub)
			if l == nil {
				return nil, false
			}
			if exact && i+1 < len(re.Sub) {
				rest := &syntax.Regexp{Op: syntax.OpConcat, Flags: re.Flags, Sub: re.Sub[i+1:]}
				if next, _ := leading(rest); next != nil && len(l)*len(next) <= maxStarts {
					var product []string
					for _, a := range l {
						for _, b := range next {
							product = append(product, a+b)
						}
					}
					l = product
				}
			}
			return append(lits, l...), false
		}
		return nil, false // every part is optional: a match may be empty
	case syntax.OpAlternate:
		exact = true
		for _, sub := range re.Sub {
			l, e := leading(sub)
			if l == nil {
				return nil, false
			}
			lits, exact = append(lits, l...), exact && e
		}
		return lits, exact
	default:
		return nil, false
	}
}

// optional reports whether re is x?, x* or x{0,n}.
func optional(re *syntax.Regexp) bool {
	return re.Op == syntax.OpQuest || re.Op == syntax.OpStar || (re.Op == syntax.OpRepeat && re.Min == 0)
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
