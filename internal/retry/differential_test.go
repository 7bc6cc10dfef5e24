package retry

import (
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/retry/internal/match"
)

// The classifier's fast paths (the literal index, the prefilters, matching
// at candidate starts, the hand matchers, the header view) must decide
// exactly as the plain code they stand for. These tests run both over the
// labelled corpus, the hint corpus and random mutations of them; the fuzz
// target does the same for any text:
//
//	go test -run '^$' -fuzz FuzzFastPathsAgree -fuzztime 60s ./internal/retry/

// guardedPatterns lists every match.Pattern the package compiles, word patterns
// (matched at a leading word boundary) marked.
func guardedPatterns() []namedPattern {
	var out []namedPattern
	families := []struct {
		name string
		p    match.Phrases
	}{
		{"overflowStrongRE", overflowStrongRE}, {"overflowGapped", overflowGapped}, {"overflowWeakRE", overflowWeakRE},
		{"throttleRE", throttleRE}, {"staleItemRE", staleItemRE}, {"transientRE", transientRE}, {"usageRE", usageRE},
		{"perMinuteRE", perMinuteRE}, {"reasonQuotaFirstRE", reasonQuotaFirstRE}, {"reasonCapacityRE", reasonCapacityRE},
		{"reasonPerDayRE", reasonPerDayRE}, {"reasonRateRE", reasonRateRE}, {"reasonQuotaRE", reasonQuotaRE},
		{"reasonServerRE", reasonServerRE},
	}
	for i, p := range staleReasoningRE {
		families = append(families, struct {
			name string
			p    match.Phrases
		}{"staleReasoningRE[" + strconv.Itoa(i) + "]", p})
	}
	for _, f := range families {
		for i := range f.p.Patterns() {
			out = append(out, namedPattern{f.name + "[" + strconv.Itoa(i) + "]", &f.p.Patterns()[i], f.p.Word()})
		}
	}
	for i := range statusPatterns {
		out = append(out, namedPattern{"statusPatterns[" + strconv.Itoa(i) + "]", &statusPatterns[i], false})
	}
	for name, g := range map[string]*match.Pattern{
		"stalePrevRE": &stalePrevRE, "staleDetailRE": &staleDetailRE, "anthropicEnvelopeRE": &anthropicEnvelopeRE,
		"beforeMessageStartRE": &beforeMessageStartRE, "accountRE": &accountRE, "hintWordings": &hintWordings,
		"msgRetryAfterMsRE": &msgRetryAfterMsRE, "msgRetryAfterRE": &msgRetryAfterRE, "msgRetryAfterDateRE": &msgRetryAfterDateRE,
		"msgAnchorRE": &msgAnchorRE, "msgResetAtRE": &msgResetAtRE, "msgRetryDelayRE": &msgRetryDelayRE,
		"msgResetMsRE": &msgResetMsRE, "msgResetRE": &msgResetRE,
	} {
		out = append(out, namedPattern{name, g, false})
	}
	return out
}

type namedPattern struct {
	name string
	g    *match.Pattern
	word bool
}

// plainWordMatch is the word patterns' matching without the fast paths: the
// leftmost match that starts at a leading word boundary.
func plainWordMatch(re *regexp.Regexp, s string) []int {
	for off := 0; off < len(s); {
		loc := re.FindStringIndex(s[off:])
		if loc == nil {
			return nil
		}
		if start := off + loc[0]; match.Lead(s, start) {
			return []int{start, off + loc[1]}
		}
		off += loc[0] + 1
	}
	return nil
}

// plainFind is match.Phrases.find without the fast paths.
func plainFind(p match.Phrases, s string) (string, bool) {
	for i := range p.Patterns() {
		var loc []int
		if p.Word() {
			loc = plainWordMatch(p.Patterns()[i].Regexp, s)
		} else {
			loc = p.Patterns()[i].Regexp.FindStringIndex(s)
		}
		if loc != nil {
			return s[loc[0]:loc[1]], true
		}
	}
	return "", false
}

// checkPatterns compares every pattern's fast matching on t with the plain
// regexp.
func checkPatterns(t *testing.T, pats []namedPattern, subj *match.Subject) {
	t.Helper()
	s := subj.S
	loc := func(start, end int, ok bool) []int {
		if !ok {
			return nil
		}
		return []int{start, end}
	}
	for _, p := range pats {
		g := p.g
		if p.word {
			if got, want := loc(g.FindWordIn(subj)), plainWordMatch(g.Regexp, s); !slices.Equal(got, want) {
				t.Fatalf("%s (%q).FindWordIn(%q, scanned %v) = %v, plain %v", p.name, g.Regexp, s, subj.IsScanned(), got, want)
			}
			continue
		}
		if got, want := loc(g.FindIn(subj)), g.Regexp.FindStringIndex(s); !slices.Equal(got, want) {
			t.Fatalf("%s (%q).FindIn(%q, scanned %v) = %v, plain %v", p.name, g.Regexp, s, subj.IsScanned(), got, want)
		}
		if got, want := g.MatchIn(subj), g.Regexp.MatchString(s); got != want {
			t.Fatalf("%s (%q).MatchIn(%q, scanned %v) = %v, plain %v", p.name, g.Regexp, s, subj.IsScanned(), got, want)
		}
		if got, want := g.FindSubmatchIn(subj), g.Regexp.FindStringSubmatch(s); !slices.Equal(got, want) {
			t.Fatalf("%s (%q).FindSubmatchIn(%q, scanned %v) = %q, plain %q", p.name, g.Regexp, s, subj.IsScanned(), got, want)
		}
		var all [][]int
		g.EachMatchIn(subj, func(start, end int) bool {
			all = append(all, []int{start, end})
			return false
		})
		if want := g.Regexp.FindAllStringIndex(s, -1); !slices.EqualFunc(all, want, slices.Equal) {
			t.Fatalf("%s (%q).EachMatchIn(%q, scanned %v) = %v, plain %v", p.name, g.Regexp, s, subj.IsScanned(), all, want)
		}
	}
}

// checkFamilies compares match.Phrases.find with plainFind.
func checkFamilies(t *testing.T, subj *match.Subject) {
	t.Helper()
	families := []match.Phrases{overflowStrongRE, overflowGapped, overflowWeakRE, throttleRE, staleItemRE, transientRE,
		usageRE, perMinuteRE, reasonQuotaFirstRE, reasonCapacityRE, reasonPerDayRE, reasonRateRE, reasonQuotaRE, reasonServerRE}
	for _, p := range append(families, staleReasoningRE...) {
		m, ok := p.Find(subj)
		wm, wok := plainFind(p, subj.S)
		if m != wm || ok != wok {
			t.Fatalf("find(%q, scanned %v) = %q %v, plain %q %v (family of %q)", subj.S, subj.IsScanned(), m, ok, wm, wok, p.Patterns()[0].Regexp)
		}
	}
}

// checkScan compares the literal index's scan with strings.Contains.
func checkScan(t *testing.T, s string) {
	t.Helper()
	if l, contained, ok := match.MisScanned(s); !ok {
		t.Fatalf("scan(%q) has %q: %v, strings.Contains says %v", s, l, !contained, contained)
	}
}

// checkText runs every comparison on a message (the patterns also on
// unscanned subjects when all).
func checkText(t *testing.T, pats []namedPattern, msg string, all bool) {
	t.Helper()
	w, l := words(msg), strings.ToLower(msg)
	for _, s := range []string{w, l} {
		checkScan(t, s)
		subjects := []match.Subject{match.Scanned(s)}
		if all {
			subjects = append(subjects, match.Subject{S: s})
		}
		for _, subj := range subjects {
			checkPatterns(t, pats, &subj)
			checkFamilies(t, &subj)
		}
	}
	m := prepareMessage(msg, true)
	if c := clip(msg); m.clipped != c || m.lower.S != strings.ToLower(c) || m.words.S != words(c) {
		t.Fatalf("prepareMessage(%q): lower %q words %q, want %q and %q", msg, m.lower.S, m.words.S, strings.ToLower(c), words(c))
	}
	for _, subj := range []*match.Subject{&m.lower, &m.words} {
		if !subj.ScanAgrees() {
			t.Fatalf("prepareMessage(%q): the scan of %q differs from scan", msg, subj.S)
		}
	}
	if got, want := statusReasonPhrase(msg), statusReasonPhraseRE.FindStringSubmatch(msg); (want == nil) != (got == "") || want != nil && got != want[1] {
		t.Fatalf("statusReasonPhrase(%q) = %q, the regexp says %q", msg, got, want)
	}
	if got, want := isOpaque(l), plainIsOpaque(l); got != want {
		t.Fatalf("isOpaque(%q) = %v, plain %v", l, got, want)
	}
	c := newFacts(Failure{ErrorMessage: msg}, m, viewHeaders(nil))
	for _, codes := range [][]int{{429}, {529, 503}, {500}, transientStatusNumbers} {
		n, ok := c.standaloneNumber(codes...)
		var wn int
		wok := standaloneNumbers(c.lower, func(k int) bool { wn = k; return slices.Contains(codes, k) })
		if !wok {
			wn = 0
		}
		if n != wn || ok != wok {
			t.Fatalf("standaloneNumber(%q, %v) = %d %v, plain %d %v", c.lower, codes, n, ok, wn, wok)
		}
	}
}

// statusReasonPhraseRE is the pattern statusReasonPhrase matches by hand.
var statusReasonPhraseRE = regexp.MustCompile(`(?:^|\s)(\d{3})\s+[A-Z][a-z]+`)

// plainIsOpaque is isOpaque as strings.FieldsFunc says it.
func plainIsOpaque(s string) bool {
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return r > 0x7f || !isAlnum(byte(r)) }) {
		if tok != "429" && !opaqueStopWords[tok] && len(tok) >= 3 {
			return false
		}
	}
	return true
}

// corpusMessages are the labelled corpus's messages and the hint tests'.
func corpusMessages() []string {
	var msgs []string
	for _, tc := range classifyCases {
		msgs = append(msgs, tc.f.ErrorMessage)
	}
	for _, tc := range append(headerHintCases(), messageHintCases()...) {
		msgs = append(msgs, tc.msg)
	}
	return msgs
}

// mutationPieces are spliced into messages: phrase fragments, camelCase,
// numbers in every context, hint wordings, and bytes that fold or decode
// oddly.
var mutationPieces = []string{
	"RateLimitError", "HTTP2StreamReset", "ThrottlingException", "APIConnectionError", "429", "500", "503", "529", "413",
	"503 Service Unavailable", "429 Too Many Requests", "status: 429", "status_code=503", "HTTP 500", "Error: 502",
	"retry-after: 5", "retry-after-ms=1500", "Retry-After: Thu, 21 Aug 2025 12:41:00 GMT", "try again in 3 minutes",
	"resets at 2025-08-21T13:00:00Z", "x-ratelimit-reset-ms=1500", `"retryDelay": "7s"`, "available again in 2h",
	"é", "K", "ſ", "İ", "\xff", "\t", "\n", `"`, "'", "_", "-", ":", "(", " ", ",", ".", "\x00",
	"account's rate limit", "per minute", "tokens per min (TPM)", "exceeded your current quota", "prompt is too long",
	"context length exceeded", "too many tokens", "connection reset by peer", "ECONNRESET", "Unterminated", "eof",
	"Item with id 'rs_1' not found", "previous_response_id", "anthropic stream envelope error:", "before message_start",
	"400 status code (no body)", "at position 500", "500 tokens", "1,500", "req_500abc", "org-uVqpjtJiKqvVJMVfvpaounIh",
	"Invalid `signature` in `thinking` block", "invalid signature in thinking block", "must start with a thinking block",
	"Expected `thinking` or `redacted_thinking`, but found `text`", "invalid_encrypted_content", "The encrypted content gAAA...DQ==",
	"could not be verified", "could not be decrypted", "organization_id did not match", "`", "signature",
	"blocks in the latest assistant message cannot be modified", "in the final position cannot contain `thinking`",
}

// mutate returns a random variation of one of msgs.
func mutate(r *rand.Rand, msgs []string) string {
	s := msgs[r.IntN(len(msgs))]
	for range 1 + r.IntN(3) {
		switch r.IntN(6) {
		case 0:
			i := r.IntN(len(s) + 1)
			s = s[:i] + mutationPieces[r.IntN(len(mutationPieces))] + s[i:]
		case 1:
			if len(s) > 0 {
				i := r.IntN(len(s))
				s = s[:i] + s[i+r.IntN(min(16, len(s)-i)+1):]
			}
		case 2:
			b := []byte(s)
			for range 1 + r.IntN(6) {
				if len(b) > 0 {
					k := r.IntN(len(b))
					if isUpper(b[k]) || isLower(b[k]) {
						b[k] ^= 'a' - 'A'
					}
				}
			}
			s = string(b)
		case 3:
			s += " " + msgs[r.IntN(len(msgs))]
		case 4:
			s = strings.ToUpper(s)
		case 5:
			s = strings.ReplaceAll(s, " ", []string{"_", "-", "", "  "}[r.IntN(4)])
		}
	}
	return s
}

// The corpus itself is FuzzFastPathsAgree's seed corpus, checked by every
// go test.
func TestFastPathsAgreeOnMutations(t *testing.T) {
	t.Parallel()
	pats := guardedPatterns()
	msgs := corpusMessages()
	n := 400
	if testing.Short() {
		n = 50
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range n {
		checkText(t, pats, mutate(r, msgs), false)
	}
	// A long message: clipped, and scanned across the clip.
	long := strings.Repeat("the upstream said: RateLimit ", 3000) + "try again in 5s"
	checkText(t, pats, long, false)
}

func FuzzFastPathsAgree(f *testing.F) {
	for _, m := range corpusMessages() {
		f.Add(m)
	}
	pats := guardedPatterns()
	f.Fuzz(func(t *testing.T, msg string) {
		checkText(t, pats, msg, true)
	})
}

// Every pattern compiled at init is numbered in the literal index and is in
// guardedPatterns; the index has room for more.
func TestLiteralIndexHasRoom(t *testing.T) {
	t.Parallel()
	fill := match.Fill()
	if !fill.Built {
		t.Fatal("the literal automaton was not built: too many literals for uint16 states")
	}
	if fill.Literals > fill.MaxLiterals*3/4 {
		t.Errorf("%d literals of at most %d: enlarge litSet", fill.Literals, fill.MaxLiterals)
	}
	if fill.Patterns > fill.MaxPatterns*3/4 {
		t.Errorf("%d patterns of at most %d: enlarge patternSet", fill.Patterns, fill.MaxPatterns)
	}
	if fill.States > fill.MaxStates*3/4 {
		t.Errorf("%d automaton states of at most %d", fill.States, fill.MaxStates)
	}
	pats := guardedPatterns()
	seqs := map[int]bool{}
	for _, p := range pats {
		if p.g.Seq() < 0 {
			t.Errorf("%s (%q) has no pattern number", p.name, p.g.Regexp)
		}
		seqs[p.g.Seq()] = true
	}
	if len(seqs) != fill.Patterns {
		t.Errorf("guardedPatterns lists %d of the %d patterns compiled at init", len(seqs), fill.Patterns)
	}
}

// hintFromMessage skips a message without "try", "reset" or "available":
// every wording it looks for contains one of them.
func TestHintWordingsGate(t *testing.T) {
	t.Parallel()
	// Every match contains one of a pattern's required literals, and begins
	// with one of its starts: either set will do.
	allGated := func(lits []string) bool {
		for _, l := range lits {
			if !hintWordings.MayMatch(l) {
				return false
			}
		}
		return len(lits) > 0
	}
	for _, g := range []*match.Pattern{&msgRetryAfterMsRE, &msgRetryAfterRE, &msgAnchorRE, &msgResetAtRE, &msgRetryDelayRE, &msgResetMsRE, &msgResetRE} {
		if !allGated(g.Literals()) && !allGated(g.Starts()) {
			t.Errorf("%q: neither its literals %q nor its starts %q all contain one of %q", g.Regexp, g.Literals(), g.Starts(), hintWordings.Literals())
		}
	}
	if !hintWordings.MayMatch("retry-after") { // the date form's own check
		t.Error(`"retry-after" does not pass the gate`)
	}
}

func TestIsPlainNumber(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^\d+(?:\.\d+)?$`)
	for _, s := range []string{"", "0", "20", "1.5", "1.", ".5", "1.5.5", "-1", "+1", "1e3", " 1", "1 ", "١", "12a", "0x1F", "9999999999999999999999", "1..2", "00.00"} {
		if got, want := isPlainNumber(s), re.MatchString(s); got != want {
			t.Errorf("isPlainNumber(%q) = %v, the regexp says %v", s, got, want)
		}
	}
}

func TestCodeKeyAndQuote(t *testing.T) {
	t.Parallel()
	plain := func(s string) string {
		return strings.ReplaceAll(strings.TrimSpace(words(strings.TrimSpace(s))), " ", "_")
	}
	for _, s := range []string{"", " ", "rate_limit_error", " rate_limit_error ", "RateLimitReached", "RATE_LIMIT_REACHED", "Rate Limit",
		"429", " 503 ", "é_error", "É_error", "\tx\t", "a b", "a\tb", "OverloadedError", "overloaded_error\n", "K"} {
		if got, want := codeKey(s), plain(s); got != want {
			t.Errorf("codeKey(%q) = %q, want %q", s, got, want)
		}
		if got, want := quote(s), strconv.Quote(s); got != want {
			t.Errorf("quote(%q) = %s, want %s", s, got, want)
		}
	}
	for _, s := range []string{`a"b`, `a\b`, "\x7f", "\x00", "é", "\xff", "~", " "} {
		if got, want := quote(s), strconv.Quote(s); got != want {
			t.Errorf("quote(%q) = %s, want %s", s, got, want)
		}
	}
}

// The header view answers as headerValue, and the bucket resets as the
// general loop, for header maps with keys in every spelling.
func TestHeaderViewAgreesWithHeaderValue(t *testing.T) {
	t.Parallel()
	keys := []string{"retry-after", "Retry-After", "RETRY-AFTER", "retry-after-ms", "Retry-After-Ms", "x-ms-retry-after-ms",
		"x-ratelimit-reset", "X-Ratelimit-Reset", "x-ratelimit-reset-ms", "X-RateLimit-Reset-Ms", "x-ratelimit-reset-after",
		"x-ratelimit-reset-tokens", "X-Ratelimit-Reset-Tokens", "x-ratelimit-remaining-tokens", "X-Ratelimit-Remaining-Tokens",
		"x-ratelimit-reset-", "X-Ratelimit-Remaining-", "x-ratelimit-reset-msx", "anthropic-ratelimit-tokens-reset",
		"Anthropic-Ratelimit-Tokens-Reset", "ANTHROPIC-RATELIMIT-TOKENS-REMAINING", "Anthropic-Ratelimit-Tokens-Status",
		"anthropic-ratelimit-unified-status", "Anthropic-Ratelimit-Unified-Status", "anthropic-ratelimit-unified-reset",
		"Anthropic-Ratelimit-Reset", "anthropic-ratelimit-a b-reset", "anthropic-ratelimit-a b-remaining", "anthropic-ratelimit-a_b-reset",
		"retry-after-m\u017f", "x-ratelimit-re\u017fet-tokens", "\u212aey", "content-type", "", "-"}
	values := []string{"", " ", "0", "2", "1.5", "7999", "6m0s", "-1", "abc", "1755780060", "1755780060000",
		"2025-08-21T12:40:59Z", "Thu, 21 Aug 2025 12:41:00 GMT", "rejected", "allowed", "ALLOWED_warning"}
	names := []string{"retry-after", "retry-after-ms", "x-ms-retry-after-ms", "x-ratelimit-reset", "x-ratelimit-reset-ms",
		"x-ratelimit-reset-after", "anthropic-ratelimit-unified-status", "x-ratelimit-remaining-tokens", "anthropic-ratelimit-a b-remaining",
		"anthropic-ratelimit-tokens-remaining", "-", "x-ratelimit-remaining-"}
	r := rand.New(rand.NewPCG(5, 6))
	for range 5000 {
		h := http.Header{}
		for range r.IntN(7) {
			k := keys[r.IntN(len(keys))]
			h[k] = append(h[k], values[r.IntN(len(values))])
		}
		v := viewHeaders(h)
		for _, n := range names {
			want := headerValue(h, n)
			if got := v.get(newHeaderName(n)); got != want {
				t.Fatalf("get(%q) in %v = %q, headerValue says %q", n, h, got, want)
			}
			if got := v.getBytes([]byte(n)); got != want {
				t.Fatalf("getBytes(%q) in %v = %q, headerValue says %q", n, h, got, want)
			}
		}
		d, ok := hintFromBucketResets(v, testNow)
		wd, wok := hintFromBucketResetsAnyKeys(h, testNow)
		if d != wd || ok != wok {
			t.Fatalf("hintFromBucketResets(%v) = %v %v, the general loop says %v %v", h, d, ok, wd, wok)
		}
	}
}

// A scan of words and lower together finds what two scans find.
func TestScanSplit(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	msgs := corpusMessages()
	for range 2000 {
		msg := clip(mutate(r, msgs))
		if ascii, _, split := caseShape(msg); !ascii || !split {
			continue
		}
		lower := strings.ToLower(msg)
		w, l := match.ScannedSplit(asciiWords(msg, lower), lower)
		if w.S != words(msg) || l.S != lower || !w.ScanAgrees() || !l.ScanAgrees() || !w.IsScanned() || !l.IsScanned() {
			t.Fatalf("match.ScannedSplit(%q) differs from two scans", msg)
		}
	}
}
