package retry

import (
	"slices"
	"strconv"
	"strings"

	"github.com/agentd/agentd/internal/retry/internal/match"
)

// This file holds the text helpers the classifier shares: normalisation,
// boundary-aware status-number detection and status extraction.

// Messages longer than clipHead+clipTail bytes are examined only at their
// head and tail (where providers put the error and where clients append
// hints such as "retry-after-ms=N"): it bounds the cost of classifying a
// dumped multi-megabyte body.
const (
	clipHead = 48 << 10
	clipTail = 16 << 10
)

// clip returns the part of a message the classifier examines.
func clip(s string) string {
	if len(s) <= clipHead+clipTail {
		return s
	}
	return s[:clipHead] + "\n" + s[len(s)-clipTail:]
}

// message is an error message prepared once for the classifier and the hint
// parser.
type message struct {
	clipped string        // clip(the message)
	lower   match.Subject // strings.ToLower(clipped); scanned when it is also words
	words   match.Subject // words(clipped), scanned; only withWords
}

// prepareMessage prepares s, with its words (for the classifier) when
// withWords. The lower-case form and the words are built in one pass each,
// and are one string (scanned once) when the message has no camelCase to
// split.
func prepareMessage(s string, withWords bool) message {
	c := clip(s)
	m := message{clipped: c}
	ascii, upper, split := caseShape(c)
	switch {
	case !ascii:
		m.lower.S = strings.ToLower(c)
	case upper:
		m.lower.S = asciiLower(c)
	default:
		m.lower.S = c
	}
	if !withWords {
		return m
	}
	switch {
	case ascii && !split: // words only lower-cases: the same string
		m.words = match.Scanned(m.lower.S)
		m.lower = m.words
	case ascii:
		m.words, m.lower = match.ScannedSplit(asciiWords(c, m.lower.S), m.lower.S)
	default:
		m.words = match.Scanned(words(c))
		if m.words.S == m.lower.S {
			m.lower = m.words
		}
	}
	return m
}

// caseShape reports whether s is ASCII, and if so whether it has upper-case
// letters and whether words would split it (a space before an upper-case
// letter: see words).
func caseShape(s string) (ascii, upper, split bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			return false, false, false
		}
		if !isUpper(c) {
			continue
		}
		upper = true
		if i > 0 && !split {
			p := s[i-1]
			split = isLower(p) || isDigit(p) || (isUpper(p) && i+1 < len(s) && isLower(s[i+1]))
		}
	}
	return true, upper, split
}

// asciiLower is strings.ToLower for an ASCII s (without its scan for
// non-ASCII bytes, which caseShape made).
func asciiLower(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	done := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; isUpper(c) {
			b.WriteString(s[done:i])
			b.WriteByte(c + ('a' - 'A'))
			done = i + 1
		}
	}
	b.WriteString(s[done:])
	return b.String()
}

// words returns the message prepared for the word patterns: camelCase and
// PascalCase identifiers are split into words ("RateLimitError" → "rate limit
// error", "HTTP2StreamReset" → "http2 stream reset") and everything is lower
// case. Splitting lets the leading word boundary of the patterns work on class
// names (ThrottlingException, APIConnectionError) without letting "terminated"
// match "Unterminated" or "rate" match "Generate".
//
// prepareMessage computes the same for ASCII messages with less work.
func words(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/8 + 1)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i > 0 && isUpper(c) {
			p := s[i-1]
			if isLower(p) || isDigit(p) || (isUpper(p) && i+1 < len(s) && isLower(s[i+1])) {
				b.WriteByte(' ')
			}
		}
		b.WriteByte(c)
	}
	return strings.ToLower(b.String())
}

// asciiWords is words for an ASCII s, given its lower-case form lower: the
// splitting of words, on the lower-casing of strings.ToLower (which for ASCII
// text only maps A–Z to a–z), in one allocation.
func asciiWords(s, lower string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/8 + 1)
	done := 0
	for i := 1; i < len(s); i++ {
		if !isUpper(s[i]) {
			continue
		}
		if p := s[i-1]; isLower(p) || isDigit(p) || (isUpper(p) && i+1 < len(s) && isLower(s[i+1])) {
			b.WriteString(lower[done:i])
			b.WriteByte(' ')
			done = i
		}
	}
	b.WriteString(lower[done:])
	return b.String()
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlnum(c byte) bool { return isUpper(c) || isLower(c) || isDigit(c) }

// numberUnitWords are words that, right after a three-digit number, show that
// the number is a quantity ("500 tokens", "503 ms"), not an HTTP status.
var numberUnitWords = []string{
	"milliseconds", "millisecond", "msecs", "msec", "ms",
	"seconds", "second", "secs", "sec", "s",
	"minutes", "minute", "mins", "min",
	"hours", "hour", "hrs", "hr",
	"days", "day",
	"tokens", "token", "requests", "request", "bytes", "byte",
	"characters", "chars", "words", "items", "messages", "kb", "mb", "gb", "%",
}

// numberContextWords are words that, right before a three-digit number, show
// that it is a position or a quantity ("at position 500", "Limit 500",
// "port 503"), not an HTTP status.
var numberContextWords = map[string]bool{
	"position": true, "pos": true, "line": true, "column": true, "col": true,
	"offset": true, "index": true, "char": true, "character": true, "byte": true,
	"length": true, "size": true, "limit": true, "max": true, "maximum": true,
	"min": true, "minimum": true, "port": true, "top": true, "than": true,
	"used": true, "requested": true, "remaining": true,
}

// previousWord returns the word before position i, skipping spaces and one
// ':' or '='.
func previousWord(s string, i int) string {
	j := i
	for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	if j > 0 && (s[j-1] == ':' || s[j-1] == '=') {
		j--
		for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
			j--
		}
	}
	k := j
	for k > 0 && isLower(s[k-1]) {
		k--
	}
	return s[k:j]
}

// standaloneNumbers calls fn for every three-digit number in s that stands on
// its own: not part of a longer number ("250000", "1,500", "2.500"), not glued
// to letters or underscores (request ids such as "req_500abc", "500ms"), and
// not followed by a unit word ("500 tokens") nor led by a context word ("at
// position 500"). It stops when fn returns true
// and reports whether it did. s must be lower case.
func standaloneNumbers(s string, fn func(n int) bool) bool {
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j-i == 3 && standalone(s, i, j) {
			n, _ := strconv.Atoi(s[i:j])
			if fn(n) {
				return true
			}
		}
		i = j
	}
	return false
}

// firstStandaloneNumber returns the first three-digit number of s that is
// one of codes and stands on its own (see standaloneNumbers).
func firstStandaloneNumber(s string, codes ...int) (int, bool) {
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j-i == 3 {
			// The (cheap) code test first: standalone looks at the words
			// around the number.
			n := int(s[i]-'0')*100 + int(s[i+1]-'0')*10 + int(s[i+2]-'0')
			if slices.Contains(codes, n) && standalone(s, i, j) {
				return n, true
			}
		}
		i = j
	}
	return 0, false
}

func standalone(s string, i, j int) bool {
	if i > 0 {
		p := s[i-1]
		if isAlnum(p) || p == '_' || p == '.' {
			return false
		}
		if p == ',' && i > 1 && isDigit(s[i-2]) {
			return false
		}
	}
	if j < len(s) {
		n := s[j]
		if isAlnum(n) || n == '_' {
			return false
		}
		if (n == '.' || n == ',') && j+1 < len(s) && isDigit(s[j+1]) {
			return false
		}
	}
	if w := previousWord(s, i); numberContextWords[w] {
		return false
	}
	rest := strings.TrimLeft(s[j:], " \t")
	for _, u := range numberUnitWords {
		if strings.HasPrefix(rest, u) && (len(rest) == len(u) || !isAlnum(rest[len(u)])) {
			return false
		}
	}
	return true
}

// transientStatusNumbers are the HTTP-like server classes of the retry policy
// (docs/retry-policy.md §1.7: 429, 500, 502, 503, 504) plus Anthropic's 529
// and Cloudflare's 520–524.
var transientStatusNumbers = []int{429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529}

// statusPatterns extract an HTTP status from error text, first match wins (the
// reference's STATUS_MESSAGE_PATTERNS, plus "429 status code" as the OpenAI
// Node SDK writes it). They are the reference's case-insensitive patterns,
// written in lower case and run on the lower-cased text (so that their
// literals prefilter them); the last one, statusReasonPhrase, is
// case-sensitive and runs on the text as written.
var statusPatterns = []match.Pattern{
	match.Compile(`\bstatus(?:_code)?[:=]\s*(\d{3})\b`),
	match.Compile(`\bstatus\s+(\d{3})\b`),
	match.Compile(`\bhttp\s+(\d{3})\b`),
	match.Compile(`\b(?:error|failed)\s*[:=]?\s*(\d{3})\b`),
	match.Compile(`(?:^|\s)(\d{3})\s+status code\b`),
}

// statusReasonPhrase returns the digits of the leftmost match of
//
//	(?:^|\s)(\d{3})\s+[A-Z][a-z]+
//
// in msg: three digits followed by a capitalised word ("429 Too Many
// Requests"), or "". It is matched by hand because the pattern has no
// literal to look for: Go's regexp engine tries it at every position, which
// costs more than all the other status patterns together.
func statusReasonPhrase(msg string) string {
	for i := 0; i+3 <= len(msg); i++ {
		if i > 0 && !isSpace(msg[i-1]) || !isDigit(msg[i]) || !isDigit(msg[i+1]) || !isDigit(msg[i+2]) {
			continue
		}
		k := i + 3
		for k < len(msg) && isSpace(msg[k]) {
			k++
		}
		if k > i+3 && k+1 < len(msg) && isUpper(msg[k]) && isLower(msg[k+1]) {
			return msg[i : i+3]
		}
	}
	return ""
}

// isSpace is regexp's \s: [\t\n\f\r ].
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// statusFromText returns the HTTP status written in an error message, or 0.
func statusFromText(msg string) int {
	return statusFromLower(msg, &match.Subject{S: strings.ToLower(msg)})
}

// statusFromLower is statusFromText with the message's lower-case form.
func statusFromLower(msg string, lower *match.Subject) int {
	for i := range statusPatterns {
		if n := statusOf(statusPatterns[i].FindSubmatchIn(lower)); n != 0 {
			return n
		}
	}
	return statusNumber(statusReasonPhrase(msg))
}

// statusOf is the status a pattern captured, or 0.
func statusOf(m []string) int {
	if m == nil {
		return 0
	}
	return statusNumber(m[1])
}

// statusNumber is the status written as digits, or 0.
func statusNumber(digits string) int {
	n, err := strconv.Atoi(digits)
	if err == nil && n >= 100 && n <= 599 {
		return n
	}
	return 0
}

// opaqueStopWords are deleted before the opaque-body test: the reference's
// http/https/status/error/code/response/message, plus body/empty/null/none
// so that "429 status code (no body)" counts as opaque.
var opaqueStopWords = map[string]bool{
	"http": true, "https": true, "status": true, "error": true, "code": true,
	"response": true, "message": true, "body": true, "empty": true, "null": true, "none": true,
}

// isOpaque reports whether a 429 message says nothing beyond "429": after
// deleting 429 and the stop words, no run of three or more letters or digits
// is left. s must be lower case. The runs are of ASCII letters and digits:
// every other byte, those of multi-byte runes included, separates them.
func isOpaque(s string) bool {
	for i := 0; i < len(s); {
		if !isAlnum(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isAlnum(s[j]) {
			j++
		}
		if tok := s[i:j]; j-i >= 3 && tok != "429" && !opaqueStopWords[tok] {
			return false
		}
		i = j
	}
	return true
}
