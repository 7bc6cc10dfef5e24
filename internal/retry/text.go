package retry

import (
	"strconv"
	"strings"
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

// words returns the message prepared for the word patterns: camelCase and
// PascalCase identifiers are split into words ("RateLimitError" → "rate limit
// error", "HTTP2StreamReset" → "http2 stream reset") and everything is lower
// case. Splitting lets the leading word boundary of the patterns work on class
// names (ThrottlingException, APIConnectionError) without letting "terminated"
// match "Unterminated" or "rate" match "Generate".
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

// hasStandaloneNumber reports whether one of codes stands on its own in s
// (lower case).
func hasStandaloneNumber(s string, codes ...int) bool {
	return standaloneNumbers(s, func(n int) bool {
		for _, c := range codes {
			if n == c {
				return true
			}
		}
		return false
	})
}

// transientStatusNumbers are the HTTP-like server classes the source lists
// (429, 500, 502, 503, 504) plus Anthropic's 529 and Cloudflare's 520–524.
var transientStatusNumbers = []int{429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529}

// statusPatterns extract an HTTP status from error text, first match wins (the
// reference's STATUS_MESSAGE_PATTERNS, plus "429 status code" as the OpenAI
// Node SDK writes it). They are the reference's case-insensitive patterns,
// written in lower case and run on the lower-cased text (so that their
// literals prefilter them); the last one is case-sensitive and runs on the
// text as written: three digits followed by a capitalised word ("429 Too
// Many Requests").
var (
	statusPatterns = []guardedRE{
		guard(`\bstatus(?:_code)?[:=]\s*(\d{3})\b`),
		guard(`\bstatus\s+(\d{3})\b`),
		guard(`\bhttp\s+(\d{3})\b`),
		guard(`\b(?:error|failed)\s*[:=]?\s*(\d{3})\b`),
		guard(`(?:^|\s)(\d{3})\s+status code\b`),
	}
	statusReasonPhraseRE = guard(`(?:^|\s)(\d{3})\s+[A-Z][a-z]+`)
)

// statusFromText returns the HTTP status written in an error message, or 0.
func statusFromText(msg string) int {
	lower := strings.ToLower(msg)
	for _, re := range statusPatterns {
		if n := statusOf(re.FindStringSubmatch(lower)); n != 0 {
			return n
		}
	}
	return statusOf(statusReasonPhraseRE.FindStringSubmatch(msg))
}

// statusOf is the status a pattern captured, or 0.
func statusOf(m []string) int {
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
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
// is left. s must be lower case.
func isOpaque(s string) bool {
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool {
		return r > 0x7f || !isAlnum(byte(r))
	}) {
		if tok == "429" || opaqueStopWords[tok] {
			continue
		}
		if len(tok) >= 3 {
			return false
		}
	}
	return true
}
