package match

import "strings"

// What the differential tests of package retry look at: they compare the
// fast paths with the plain regexps on the classifier's own patterns, so
// they need to see the patterns' prefilters and the subjects' scans.

// Patterns are p's patterns, in order.
func (p Phrases) Patterns() []Pattern { return p.res }

// Word reports whether p's matches must start at a word boundary (Lead).
func (p Phrases) Word() bool { return p.word }

// IsScanned reports whether t went through the literal index.
func (t *Subject) IsScanned() bool { return t.scanned }

// ScanAgrees reports whether t, when scanned, holds what a fresh scan of
// its text finds.
func (t *Subject) ScanAgrees() bool { return !t.scanned || t.found == literals.scan(t.S) }

// Literals are the literals one of which every match of g contains (nil:
// no prefilter).
func (g *Pattern) Literals() []string { return g.lits }

// Starts are the literals every match of g begins with (nil: unknown).
func (g *Pattern) Starts() []string { return g.starts }

// Seq is g's number in the literal index (-1: none).
func (g *Pattern) Seq() int { return g.seq }

// MisScanned returns an indexed literal whose presence in s the index's
// scan gets wrong, and what strings.Contains says; ok when there is none.
func MisScanned(s string) (lit string, contained bool, ok bool) {
	found := literals.scan(s)
	for id, l := range literals.lits {
		if found.has(id) != strings.Contains(s, l) {
			return l, !found.has(id), false
		}
	}
	return "", false, true
}

// IndexFill is how full the literal index is: its literals, patterns and
// automaton states, each with its bound; built is false when the
// automaton could not be built.
type IndexFill struct {
	Literals, MaxLiterals int
	Patterns, MaxPatterns int
	States, MaxStates     int
	Built                 bool
}

// Fill is the literal index's IndexFill.
func Fill() IndexFill {
	return IndexFill{
		Literals: len(literals.lits), MaxLiterals: maxLiterals,
		Patterns: literals.patterns, MaxPatterns: maxPatterns,
		States: len(literals.next) / numClasses, MaxStates: 1 << 16 / numClasses,
		Built: literals.ready(),
	}
}
