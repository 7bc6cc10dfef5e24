package match

// lead is the leading word boundary of the word patterns: the start of the
// text or a byte that is not a lower-case letter or a digit.
func Lead(s string, i int) bool { return i == 0 || !(isLower(s[i-1]) || isDigit(s[i-1])) }

// Phrases is a pattern family. Each pattern is compiled on its own, so that
// the regexp engine can skip ahead to its literal prefix instead of running
// one large alternation at every byte, and its prefilter (pattern.go) decides
// whether it runs at all.
type Phrases struct {
	res  []Pattern
	word bool // each match must start at a word boundary (lead)
}

// WordPhrases is a family whose matches must start at a word boundary.
func WordPhrases(alts ...string) Phrases {
	p := AnyPhrases(alts...)
	p.word = true
	return p
}

// AnyPhrases is a family whose matches may start anywhere.
func AnyPhrases(alts ...string) Phrases {
	p := Phrases{res: make([]Pattern, len(alts))}
	for i, a := range alts {
		p.res[i] = Compile(a)
	}
	return p
}

// find returns the text matched by the first pattern (in list order) that
// matches t.
func (p Phrases) Find(t *Subject) (string, bool) {
	for i := range p.res {
		re := &p.res[i]
		if !p.word && re.literal != "" && t.scanned {
			// A literal the scan looked for: found is the answer.
			if re.MayMatchIn(t) {
				return re.literal, true
			}
			continue
		}
		var start, end int
		var ok bool
		if p.word {
			start, end, ok = re.FindWordIn(t)
		} else {
			start, end, ok = re.FindIn(t)
		}
		if ok {
			return t.S[start:end], true
		}
	}
	return "", false
}

// match reports whether any pattern matches t.
func (p Phrases) Match(t *Subject) bool {
	_, ok := p.Find(t)
	return ok
}
