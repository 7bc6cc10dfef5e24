package match

import (
	"math/bits"
	"strings"
)

// The literal index answers, for one text, which of the classifier's literals
// it contains, in a single pass over the text.
//
// Why it exists: every pattern of the phrase families has a prefilter, the
// literals every match must contain (pattern.go), and most patterns cannot
// match most messages. Checked one strings.Contains at a time, the ~150
// patterns' prefilters cost more than the few regexps that then run (F7 in
// BENCHMARKS.md). Instead, every prefilter literal is registered here when
// the patterns are compiled, the classifier scans the prepared message once,
// and each prefilter becomes a few bit tests.
//
// The scan is an Aho–Corasick automaton, compiled into a table of
// transitions: one table load per byte of text, whatever the number of
// literals. To keep the table small (about 60 KiB), the automaton knows only
// the first keyLen bytes of each literal, over a coarse alphabet (letters,
// one class for digits, one for space, one for every other byte); when it
// reaches the end of such a key, the literals that end there are compared
// with the text, so the answer is exact.

// litSet is a set of literal ids of the index, as a bit set. Fixed size, so
// that a scan allocates nothing.
type litSet [10]uint64

// maxLiterals is how many literals the index can hold.
const maxLiterals = len(litSet{}) * 64

func (s *litSet) add(id int)      { s[id>>6] |= 1 << (id & 63) }
func (s *litSet) has(id int) bool { return s[id>>6]&(1<<(id&63)) != 0 }

// minIndexedLen is the length of the shortest literal the index holds (a
// prefilter clause with a shorter one is dropped: such literals are in
// almost every message anyway).
const minIndexedLen = 3

// patternSet is a set of pattern numbers (Pattern.seq), as a bit set.
type patternSet [4]uint64

// maxPatterns is how many patterns get a number.
const maxPatterns = len(patternSet{}) * 64

func (s *patternSet) add(n int)      { s[n>>6] |= 1 << (n & 63) }
func (s *patternSet) has(n int) bool { return s[n>>6]&(1<<(n&63)) != 0 }

// keyLen is how many bytes of each literal the automaton follows.
const keyLen = 8

// The automaton's alphabet: a class per lower-case letter, then digits,
// space and every other byte. The texts it scans are lower case. numClasses
// is a power of two (states are multiples of it).
const (
	classDigit = 26 + iota
	classSpace
	classOther
	numClasses = 32
)

var byteClass = func() (c [256]uint8) {
	for b := range c {
		switch {
		case isLower(byte(b)):
			c[b] = uint8(b - 'a')
		case isDigit(byte(b)):
			c[b] = classDigit
		case b == ' ':
			c[b] = classSpace
		default:
			c[b] = classOther
		}
	}
	return c
}()

// literalIndex is the set of indexed literals and their automaton. Literals
// are registered (id) while the package's patterns are compiled; build then
// seals the index. A literal asked for after that gets no id, and its
// pattern is simply not prefiltered through the index.
type literalIndex struct {
	lits   []string
	ids    map[string]int
	sealed bool

	// next[st+c] is the state after state st (a multiple of numClasses)
	// reads a byte of class c. States from firstFinal on end at least one
	// key; ends[(st-firstFinal)/numClasses] lists the literals whose keys
	// end there (their own and, through the failure links, their suffixes').
	// The root is state 0.
	next       []uint16
	firstFinal int
	ends       [][]uint16

	// The patterns compiled before build are numbered: firstOf[id] lists
	// those whose first prefilter clause holds literal id, and open those
	// without a clause. From the literals a scan found, candidates tells
	// which patterns' first clauses hold, so that most patterns are
	// rejected by one bit test.
	patterns int
	firstOf  [][]uint16
	open     patternSet
}

// literals is the index of every pattern compiled before Build.
var literals = &literalIndex{ids: map[string]int{}}

// Build compiles the literal index of every pattern compiled so far (by
// Compile, AnyPhrases and WordPhrases). The patterns are package variables
// of package retry, so retry calls Build from its init, which runs after
// them; patterns compiled later match without the index.
func Build() { literals.build() }

// id returns the id of lit, registering it if needed. ok is false when lit
// cannot be indexed: too short, asked for after the index was built, or the
// index is full (TestLiteralIndexHasRoom keeps it from being full).
func (x *literalIndex) id(lit string) (id int, ok bool) {
	if len(lit) < minIndexedLen {
		return 0, false
	}
	if id, ok := x.ids[lit]; ok {
		return id, true
	}
	if x.sealed || len(x.lits) == maxLiterals {
		return 0, false
	}
	x.ids[lit] = len(x.lits)
	x.lits = append(x.lits, lit)
	return len(x.lits) - 1, true
}

// pattern numbers a pattern with the given clauses (literal ids), or
// returns -1 when it cannot: after build, or when maxPatterns are numbered.
func (x *literalIndex) pattern(clauses [][]int) int {
	if x.sealed || x.patterns == maxPatterns {
		return -1
	}
	n := x.patterns
	x.patterns++
	if len(clauses) == 0 {
		x.open.add(n)
		return n
	}
	for _, id := range clauses[0] {
		for len(x.firstOf) <= id {
			x.firstOf = append(x.firstOf, nil)
		}
		x.firstOf[id] = append(x.firstOf[id], uint16(n))
	}
	return n
}

// candidates returns the patterns whose first clause holds in a text with
// the literals found (and those without a clause).
func (x *literalIndex) candidates(found *litSet) patternSet {
	c := x.open
	for w, word := range found {
		for word != 0 {
			id := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			if id < len(x.firstOf) {
				for _, n := range x.firstOf[id] {
					c.add(int(n))
				}
			}
		}
	}
	return c
}

// build seals the index and compiles the automaton.
func (x *literalIndex) build() {
	x.sealed = true
	// The trie of the keys. State 0 is the root; goto_ has -1 where the
	// trie has no edge.
	type node struct {
		goto_ [numClasses]int
		fail  int
		ends  []uint16
	}
	newNode := func() node {
		var n node
		for c := range n.goto_ {
			n.goto_[c] = -1
		}
		return n
	}
	nodes := []node{newNode()}
	for id, l := range x.lits {
		st := 0
		for i := 0; i < len(l) && i < keyLen; i++ {
			c := byteClass[l[i]]
			if nodes[st].goto_[c] < 0 {
				nodes[st].goto_[c] = len(nodes)
				nodes = append(nodes, newNode())
			}
			st = nodes[st].goto_[c]
		}
		nodes[st].ends = append(nodes[st].ends, uint16(id))
	}
	// Failure links and the complete transition function, breadth first:
	// a missing edge goes where the failure state's edge goes.
	order := make([]int, 0, len(nodes))
	for c, child := range nodes[0].goto_ {
		if child < 0 {
			nodes[0].goto_[c] = 0
		} else {
			order = append(order, child)
		}
	}
	for k := 0; k < len(order); k++ {
		st := order[k]
		f := nodes[st].fail
		nodes[st].ends = append(nodes[st].ends, nodes[f].ends...)
		for c, child := range nodes[st].goto_ {
			if child < 0 {
				nodes[st].goto_[c] = nodes[f].goto_[c]
				continue
			}
			nodes[child].fail = nodes[f].goto_[c]
			order = append(order, child)
		}
	}
	// Number the states so that those ending keys come last.
	number := make([]int, len(nodes))
	n := 0
	for pass := range 2 {
		for st := range nodes {
			if (len(nodes[st].ends) > 0) == (pass == 1) {
				number[st] = n
				n++
				if pass == 1 {
					x.ends = append(x.ends, nodes[st].ends)
				}
			}
		}
	}
	x.firstFinal = (len(nodes) - len(x.ends)) * numClasses
	if len(nodes)*numClasses > 1<<16 {
		// Too many literals for uint16 states: no index, every prefilter
		// checks its literals with strings.Contains (TestLiteralIndexHasRoom).
		x.ends = nil
		return
	}
	x.next = make([]uint16, len(nodes)*numClasses)
	for st := range nodes {
		for c, to := range nodes[st].goto_ {
			x.next[number[st]*numClasses+c] = uint16(number[to] * numClasses)
		}
	}
}

// ready reports whether the automaton was built.
func (x *literalIndex) ready() bool { return x.next != nil }

// scan returns the set of indexed literals that occur in s.
func (x *literalIndex) scan(s string) litSet {
	var found litSet
	next, firstFinal := x.next, x.firstFinal
	st := 0
	for i, b := range []byte(s) {
		st = int(next[st+int(byteClass[b])])
		if st >= firstFinal {
			x.verify(&found, s, i, st)
		}
	}
	return found
}

// scanSplit is scan of words and of lower, for words that is lower with
// spaces inserted (asciiWords), in one pass: the run over lower skips the
// inserted spaces, and the two runs, being independent, overlap each other's
// load latency.
func (x *literalIndex) scanSplit(words, lower string) (inWords, inLower litSet) {
	next, firstFinal := x.next, x.firstFinal
	stW, stL, k := 0, 0, 0
	for j := 0; j < len(words); j++ {
		b := words[j]
		stW = int(next[stW+int(byteClass[b])])
		if stW >= firstFinal {
			x.verify(&inWords, words, j, stW)
		}
		if k < len(lower) && lower[k] == b { // else an inserted space
			stL = int(next[stL+int(byteClass[b])])
			if stL >= firstFinal {
				x.verify(&inLower, lower, k, stL)
			}
			k++
		}
	}
	return inWords, inLower
}

// verify adds to found the literals whose keys end at s[i] (in state st)
// and that occur there in full.
func (x *literalIndex) verify(found *litSet, s string, i, st int) {
	for _, id := range x.ends[(st-x.firstFinal)/numClasses] {
		l := x.lits[id]
		start := i + 1 - min(len(l), keyLen)
		if strings.HasPrefix(s[start:], l) {
			found.add(int(id))
		}
	}
}
