package retry

import (
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/retry/internal/match"
)

// MaxHint bounds every hint ParseHint returns: a week plus an hour, the
// longest real provider window (weekly usage limits) with some slack. Longer
// values are clamped to it, not ignored: "a very long time" stays long enough
// to trip retry.max_delay_ms, while a garbage value cannot overflow.
const MaxHint = 7*24*time.Hour + time.Hour

// ParseHint extracts the provider's retry hint. It returns a duration in
// [0, MaxHint] and true, or 0 and false when nothing usable is found.
// Malformed values are ignored (the next source is tried); it never panics.
//
// Sources, first usable one wins:
//
//  1. Headers that say when to retry: retry-after-ms (and Azure's
//     x-ms-retry-after-ms; milliseconds, fractions allowed), retry-after
//     (seconds, fractions allowed, or an HTTP date), x-ratelimit-reset-ms,
//     x-ratelimit-reset (seconds, or a Go duration such as "6m0s"),
//     x-ratelimit-reset-after (seconds or Go duration). For the reset headers
//     a value above 1e12 is an epoch in milliseconds and above 1e9 an epoch in
//     seconds (as the reference does).
//  2. The message wording: "retry-after-ms=N" and "retry-after: N|date"
//     echoed into the text, spoken durations after "try again in", "retry
//     in", "retry after" (Azure's "Please retry after 7 seconds"), "reset(s)
//     in", "reset after", "available in" ("1.4s",
//     "644ms", "~158 min", "3 hours", "18h31m10s", "1 day 2 hours and 5
//     minutes"), "resets at <RFC 3339 time>", Gemini's "retryDelay": "7s",
//     and "x-ratelimit-reset(-ms)=N" echoed into the text. A spoken duration
//     must be > 0.
//  3. Per-bucket reset headers: anthropic-ratelimit-*-reset (RFC 3339 or an
//     epoch) and x-ratelimit-reset-requests|tokens|… (Go durations). Only
//     exhausted buckets count (a bucket whose -remaining is above 0, or whose
//     -status is "allowed…", is skipped); the latest reset among them wins.
//     These come after the wording because they give the time until the
//     bucket is full again, not the earliest moment a request is allowed
//     (the OpenAI rate-limit headers): OpenAI's "try again in 9.8s" beats
//     "x-ratelimit-reset-tokens: 6m0s".
//
// Absolute times (HTTP dates, epochs, RFC 3339) are taken relative to now; a
// time in the past gives 0 (retry at once). Header names are matched
// case-insensitively. A message longer than 64 KiB is read at its first 48
// KiB and last 16 KiB.
func ParseHint(h http.Header, message string, now time.Time) (time.Duration, bool) {
	return parseHint(viewHeaders(h), prepareMessage(message, false), now)
}

// parseHint is ParseHint on prepared headers and message.
func parseHint(h headerView, msg message, now time.Time) (time.Duration, bool) {
	if d, ok := hintFromRetryHeaders(h, now); ok {
		return d, true
	}
	if d, ok := hintFromMessage(msg, now); ok {
		return d, true
	}
	return hintFromBucketResets(h, now)
}

// headerView is a header map prepared for look-ups by lower-case name, by
// headerValue's rules: the canonical key's first non-empty value, else the
// first non-empty value among the other keys equal to the name up to case, in
// sorted order.
//
// Why it exists: headerValue canonicalises the name, which allocates, and
// when the canonical key has no value, as for most of the names a hint is
// looked for under, it compares every key of the map with strings.EqualFold.
// Here the names come canonicalised, and when every key is ASCII (as in the
// maps net/http builds) only a key of the name's length can equal it up to
// case, so keyLens usually answers at once. (EqualFold folds two non-ASCII
// letters into ASCII ones, the Kelvin sign and the long s: a map with a
// non-ASCII key takes headerValue's way.)
type headerView struct {
	h         http.Header
	asciiKeys bool
	keyLens   uint64 // bit lenBit(n) is set when some key has n bytes
}

func viewHeaders(h http.Header) headerView {
	var lens uint64
	var or byte // of every byte of every key
	for k := range h {
		lens |= lenBit(len(k))
		for _, c := range []byte(k) {
			or |= c
		}
	}
	return headerView{h: h, asciiKeys: or < 0x80, keyLens: lens}
}

// lenBit is the keyLens bit of length n (lengths from 63 on share one).
func lenBit(n int) uint64 { return 1 << min(n, 63) }

// get is headerValue(h, name.lower).
func (v headerView) get(name headerName) string {
	if !v.asciiKeys {
		return headerValue(v.h, name.lower)
	}
	if s := firstValue(v.h[name.canonical]); s != "" {
		return s
	}
	return v.otherSpelling(name.lower)
}

// otherSpelling is headerValue's second step for a map of ASCII keys: the
// keys equal to name up to case (the canonical one included: its values
// are empty), in sorted order.
func (v headerView) otherSpelling(name string) string {
	if v.keyLens&lenBit(len(name)) == 0 {
		return ""
	}
	var keys []string
	for k := range v.h {
		if len(k) == len(name) && strings.EqualFold(k, name) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if s := firstValue(v.h[k]); s != "" {
			return s
		}
	}
	return ""
}

// getBytes is get for a lower-case name built in a byte slice, which it
// does not keep: the canonical form is built on the stack too, so that a
// look-up allocates nothing (other than when a key of the name's length
// could be another spelling of it).
func (v headerView) getBytes(name []byte) string {
	var buf [128]byte
	canonical, ok := canonicalToken(buf[:0], name)
	if !v.asciiKeys || !ok {
		return headerValue(v.h, string(name))
	}
	if s := firstValue(v.h[string(canonical)]); s != "" {
		return s
	}
	if v.keyLens&lenBit(len(name)) == 0 {
		return ""
	}
	return v.otherSpelling(string(name))
}

// canonicalToken appends to dst http.CanonicalHeaderKey(name) for a name made
// of lower-case ASCII letters, digits and '-' (upper case at the start and
// after each '-'); ok is false for any other name.
func canonicalToken(dst, name []byte) (_ []byte, ok bool) {
	upper := true
	for _, c := range name {
		switch {
		case c == '-':
		case isDigit(c):
		case isLower(c):
			if upper {
				c -= 'a' - 'A'
			}
		default:
			return dst, false
		}
		dst = append(dst, c)
		upper = c == '-'
	}
	return dst, len(name) > 0
}

// headerName is a header name in lower case and in canonical form.
type headerName struct{ lower, canonical string }

func newHeaderName(lower string) headerName {
	return headerName{lower: lower, canonical: http.CanonicalHeaderKey(lower)}
}

var (
	hdrRetryAfterMs        = newHeaderName("retry-after-ms")
	hdrMsRetryAfterMs      = newHeaderName("x-ms-retry-after-ms")
	hdrRetryAfter          = newHeaderName("retry-after")
	hdrRateLimitResetMs    = newHeaderName("x-ratelimit-reset-ms")
	hdrRateLimitReset      = newHeaderName("x-ratelimit-reset")
	hdrRateLimitResetAfter = newHeaderName("x-ratelimit-reset-after")
	hdrUnifiedStatus       = newHeaderName("anthropic-ratelimit-unified-status")
)

// firstValue is the first non-empty value of vs, trimmed.
func firstValue(vs []string) string {
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// headerValue returns the first non-empty value of the header name, matched
// case-insensitively (canonical key first, then other spellings in sorted
// order so that the result is deterministic).
func headerValue(h http.Header, name string) string {
	if h == nil {
		return ""
	}
	for _, v := range h[http.CanonicalHeaderKey(name)] {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	var keys []string
	for k := range h {
		if strings.EqualFold(k, name) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			if v = strings.TrimSpace(v); v != "" {
				return v
			}
		}
	}
	return ""
}

// parseNumber parses a plain non-negative decimal ("20", "1.5"); no signs,
// exponents, hex, Inf or NaN.
func parseNumber(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if !isPlainNumber(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(v, 1) { // a huge value parses as +Inf with ErrRange: clamp it below
		return 0, false
	}
	return v, true
}

// isPlainNumber reports whether s matches ^\d+(?:\.\d+)?$: digits,
// optionally a point and more digits (checked by hand: it runs for every
// header value and spoken number).
func isPlainNumber(s string) bool {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i == 0 || i == len(s) {
		return i > 0
	}
	if s[i] != '.' {
		return false
	}
	j := i + 1
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	return j > i+1 && j == len(s)
}

// scaled converts v units into a duration in [0, MaxHint].
func scaled(v float64, unit time.Duration) (time.Duration, bool) {
	if math.IsNaN(v) || v < 0 {
		return 0, false
	}
	ns := v * float64(unit)
	if ns >= float64(MaxHint) {
		return MaxHint, true
	}
	return time.Duration(math.Round(ns)), true
}

// until is the time from now to t, in [0, MaxHint].
func until(t, now time.Time) time.Duration {
	d := t.Sub(now) // saturates instead of overflowing
	if d < 0 {
		return 0
	}
	if d > MaxHint {
		return MaxHint
	}
	return d
}

// resetValue parses a reset value: an epoch in ms (> 1e12) or s (> 1e9), a
// relative number of units, or a Go duration.
func resetValue(s string, unit time.Duration, now time.Time) (time.Duration, bool) {
	if v, ok := parseNumber(s); ok {
		switch {
		case v > 1e15: // beyond year 33000 even in milliseconds
			return MaxHint, true
		case v > 1e12:
			return until(time.UnixMilli(int64(v)), now), true
		case v > 1e9:
			sec, frac := math.Modf(v)
			return until(time.Unix(int64(sec), int64(frac*1e9)), now), true
		}
		return scaled(v, unit)
	}
	return goDuration(s)
}

// goDuration parses a non-negative Go duration ("6m0s", "23h47m36.648s").
func goDuration(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s[0] == '-' || s[0] == '+' {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, false
	}
	if d > MaxHint {
		d = MaxHint
	}
	return d, true
}

func hintFromRetryHeaders(h headerView, now time.Time) (time.Duration, bool) {
	if len(h.h) == 0 {
		return 0, false
	}
	for _, name := range []headerName{hdrRetryAfterMs, hdrMsRetryAfterMs} {
		if v, ok := parseNumber(h.get(name)); ok {
			return scaled(v, time.Millisecond)
		}
	}
	if v := h.get(hdrRetryAfter); v != "" {
		if n, ok := parseNumber(v); ok {
			return scaled(n, time.Second)
		}
		if t, err := http.ParseTime(v); err == nil {
			return until(t, now), true
		}
	}
	if d, ok := resetValue(h.get(hdrRateLimitResetMs), time.Millisecond, now); ok {
		return d, true
	}
	for _, name := range []headerName{hdrRateLimitReset, hdrRateLimitResetAfter} {
		if d, ok := resetValue(h.get(name), time.Second, now); ok {
			return d, true
		}
	}
	return 0, false
}

// Message wordings, in the order they are tried. All but the date pattern run
// on the lower-cased message.
var (
	msgRetryAfterMsRE   = match.Compile(`retry-after-ms"?\s*[:=]\s*"?(\d+(?:\.\d+)?)`)
	msgRetryAfterRE     = match.Compile(`retry-after"?\s*[:=]\s*"?(\d+(?:\.\d+)?)\b`)
	msgRetryAfterDateRE = match.Compile(`(?i)retry-after"?\s*[:=]\s*"?([a-z]{3,9}, \d{1,2}[ -][a-z]{3}[ -]\d{2,4} \d{2}:\d{2}:\d{2} gmt)`)
	msgAnchorRE         = match.Compile(`\b(?:try(?:ing)? again|retry(?:ing)?|resets?|available(?: again)?)\s+(?:in|after)\b`)
	msgResetAtRE        = match.Compile(`\bresets?\s+(?:at|on)\s+(\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:z|[+-]\d{2}:\d{2}))`)
	msgRetryDelayRE     = match.Compile(`retry_?delay"?\s*[:=]\s*"?(\d+(?:\.\d+)?)\s*(ms|s)\b`)
	msgResetMsRE        = match.Compile(`x-ratelimit-reset-ms"?\s*[:=]\s*"?(\d+(?:\.\d+)?)`)
	msgResetRE          = match.Compile(`x-ratelimit-reset"?\s*[:=]\s*"?(\d+(?:\.\d+)?)`)
)

func hintFromMessage(prepared message, now time.Time) (time.Duration, bool) {
	if prepared.clipped == "" {
		return 0, false
	}
	msg, low := prepared.clipped, &prepared.lower
	lower := low.S
	// Every wording below contains "try", "reset" or "available" (retry,
	// x-ratelimit-reset, …): without them, none can match.
	if !mayHaveHintWording(low) {
		return 0, false
	}
	if m := msgRetryAfterMsRE.FindSubmatchIn(low); m != nil {
		if v, ok := parseNumber(m[1]); ok {
			return scaled(v, time.Millisecond)
		}
	}
	if m := msgRetryAfterRE.FindSubmatchIn(low); m != nil {
		if v, ok := parseNumber(m[1]); ok {
			return scaled(v, time.Second)
		}
	}
	// The date form runs on the text as written (for http.ParseTime); its
	// case-insensitive pattern has no prefilter of its own.
	if strings.Contains(lower, "retry-after") {
		if m := msgRetryAfterDateRE.FindSubmatchIn(&match.Subject{S: msg}); m != nil {
			if t, err := http.ParseTime(m[1]); err == nil {
				return until(t, now), true
			}
		}
	}
	var spoken time.Duration
	msgAnchorRE.EachMatchIn(low, func(_, end int) bool {
		d, ok := spokenDuration(lower[end:])
		if ok && d > 0 {
			spoken = d
		}
		return spoken > 0
	})
	if spoken > 0 {
		return spoken, true
	}
	if m := msgResetAtRE.FindSubmatchIn(low); m != nil {
		ts := strings.ToUpper(strings.Replace(m[1], " ", "T", 1))
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			return until(t, now), true
		}
	}
	if m := msgRetryDelayRE.FindSubmatchIn(low); m != nil {
		unit := time.Second
		if m[2] == "ms" {
			unit = time.Millisecond
		}
		if v, ok := parseNumber(m[1]); ok && v > 0 {
			return scaled(v, unit)
		}
	}
	if m := msgResetMsRE.FindSubmatchIn(low); m != nil {
		if d, ok := resetValue(m[1], time.Millisecond, now); ok {
			return d, true
		}
	}
	if m := msgResetRE.FindSubmatchIn(low); m != nil {
		if d, ok := resetValue(m[1], time.Second, now); ok {
			return d, true
		}
	}
	return 0, false
}

// hintWordings are literals one of which every message wording of a hint
// contains.
var hintWordings = match.Compile(`try|reset|available`)

func mayHaveHintWording(lower *match.Subject) bool { return hintWordings.MayMatchIn(lower) }

// spokenUnits are the unit words of spoken durations, longest first so that
// "ms" wins over "m" and "mins" over "min".
var spokenUnits = func() []struct {
	name string
	d    time.Duration
} {
	u := []struct {
		name string
		d    time.Duration
	}{
		{"milliseconds", time.Millisecond}, {"millisecond", time.Millisecond}, {"msecs", time.Millisecond},
		{"msec", time.Millisecond}, {"ms", time.Millisecond},
		{"seconds", time.Second}, {"second", time.Second}, {"secs", time.Second}, {"sec", time.Second}, {"s", time.Second},
		{"minutes", time.Minute}, {"minute", time.Minute}, {"mins", time.Minute}, {"min", time.Minute}, {"m", time.Minute},
		{"hours", time.Hour}, {"hour", time.Hour}, {"hrs", time.Hour}, {"hr", time.Hour}, {"h", time.Hour},
		{"days", 24 * time.Hour}, {"day", 24 * time.Hour}, {"d", 24 * time.Hour},
	}
	sort.SliceStable(u, func(i, j int) bool { return len(u[i].name) > len(u[j].name) })
	return u
}()

// spokenDuration parses the duration at the start of s (lower case): one or
// more "<number> <unit>" pairs, optionally led by "~", "about" or
// "approximately", separated by spaces, commas or "and" ("~158 min",
// "18h31m10s", "1 day, 2 hours and 5 minutes"). It stops at the first thing
// that is not such a pair.
func spokenDuration(s string) (time.Duration, bool) {
	i := skipSpaces(s, 0)
	for _, p := range []string{"~", "about ", "approximately ", "approx. ", "approx "} {
		if strings.HasPrefix(s[i:], p) {
			i = skipSpaces(s, i+len(p))
			break
		}
	}
	var total float64 // nanoseconds
	pairs := 0
	for {
		j := i
		if pairs > 0 {
			j = skipSpaces(s, j)
			if j < len(s) && s[j] == ',' {
				j = skipSpaces(s, j+1)
			}
			if strings.HasPrefix(s[j:], "and ") {
				j = skipSpaces(s, j+4)
			}
		}
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k == j {
			break
		}
		if k+1 < len(s) && s[k] == '.' && isDigit(s[k+1]) {
			k++
			for k < len(s) && isDigit(s[k]) {
				k++
			}
		}
		num, ok := parseNumber(s[j:k])
		if !ok {
			break
		}
		u := skipSpaces(s, k)
		var unit time.Duration
		for _, cand := range spokenUnits {
			if strings.HasPrefix(s[u:], cand.name) {
				end := u + len(cand.name)
				if end == len(s) || !isLower(s[end]) {
					unit, u = cand.d, end
					break
				}
			}
		}
		if unit == 0 {
			break
		}
		total += num * float64(unit)
		pairs++
		i = u
	}
	if pairs == 0 {
		return 0, false
	}
	return scaled(total, 1)
}

func skipSpaces(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// hintFromBucketResets reads the per-bucket reset headers of exhausted
// buckets and returns the latest reset.
func hintFromBucketResets(h headerView, now time.Time) (time.Duration, bool) {
	if len(h.h) == 0 {
		return 0, false
	}
	if !h.asciiKeys {
		return hintFromBucketResetsAnyKeys(h.h, now)
	}
	// hintFromBucketResetsAnyKeys for ASCII keys, whose lower-case forms (and
	// the names of a bucket's other headers) are built on the stack.
	const (
		anthropicPrefix = "anthropic-ratelimit-"
		resetSuffix     = "-reset"
		resetPrefix     = "x-ratelimit-reset-"
	)
	var best time.Duration
	found := false
	var nameBuf, otherBuf [128]byte
	for k := range h.h {
		if len(k) < len(resetPrefix) { // the shorter of the two prefixes
			continue
		}
		var d time.Duration
		var ok bool
		switch {
		case hasPrefixFold(k, anthropicPrefix) && hasSuffixFold(k, resetSuffix):
			name := appendLower(nameBuf[:0], k)
			bucket := name[:len(name)-len(resetSuffix)]
			if remainingLeft(h.getBytes(append(append(otherBuf[:0], bucket...), "-remaining"...))) ||
				statusAllowed(h.getBytes(append(append(otherBuf[:0], bucket...), "-status"...))) {
				continue
			}
			d, ok = absoluteReset(h.getBytes(name), now)
		case hasPrefixFold(k, resetPrefix) && !equalFold(k, "x-ratelimit-reset-ms") && !equalFold(k, "x-ratelimit-reset-after"):
			name := appendLower(nameBuf[:0], k)
			bucket := name[len(resetPrefix):]
			if remainingLeft(h.getBytes(append(append(otherBuf[:0], "x-ratelimit-remaining-"...), bucket...))) {
				continue
			}
			d, ok = resetValue(h.getBytes(name), time.Second, now)
		default:
			continue
		}
		if ok && (!found || d > best) {
			best, found = d, true
		}
	}
	return best, found
}

// hasPrefixFold and hasSuffixFold are HasPrefix and HasSuffix up to ASCII
// case, for an ASCII s and a lower-case affix.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && equalLower(s[:len(prefix)], prefix)
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && equalLower(s[len(s)-len(suffix):], suffix)
}

// equalFold is strings.EqualFold for an ASCII s and a lower-case t.
func equalFold(s, t string) bool { return len(s) == len(t) && equalLower(s, t) }

// equalLower reports whether the ASCII s lower-cased is lower.
func equalLower(s, lower string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isUpper(c) {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// appendLower appends the lower-case form of the ASCII s to dst.
func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isUpper(c) {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// hintFromBucketResetsAnyKeys is hintFromBucketResets for a map with keys
// in any form.
func hintFromBucketResetsAnyKeys(h http.Header, now time.Time) (time.Duration, bool) {
	var best time.Duration
	found := false
	for k := range h {
		name := strings.ToLower(k)
		var d time.Duration
		var ok bool
		switch {
		case strings.HasPrefix(name, "anthropic-ratelimit-") && strings.HasSuffix(name, "-reset"):
			bucket := strings.TrimSuffix(name, "-reset")
			if !bucketExhausted(h, bucket+"-remaining", bucket+"-status") {
				continue
			}
			d, ok = absoluteReset(headerValue(h, name), now)
		case strings.HasPrefix(name, "x-ratelimit-reset-") && name != "x-ratelimit-reset-ms" && name != "x-ratelimit-reset-after":
			bucket := strings.TrimPrefix(name, "x-ratelimit-reset-")
			if !bucketExhausted(h, "x-ratelimit-remaining-"+bucket, "") {
				continue
			}
			d, ok = resetValue(headerValue(h, name), time.Second, now)
		default:
			continue
		}
		if ok && (!found || d > best) {
			best, found = d, true
		}
	}
	return best, found
}

// bucketExhausted reports whether a rate-limit bucket may be the one that
// stopped the request: its remaining count is unknown or not above 0, and its
// status (Anthropic unified windows) is not "allowed…".
func bucketExhausted(h http.Header, remainingName, statusName string) bool {
	status := ""
	if statusName != "" {
		status = headerValue(h, statusName)
	}
	return exhaustedBucket(headerValue(h, remainingName), status)
}

// exhaustedBucket is bucketExhausted on the values of the two headers.
func exhaustedBucket(remaining, status string) bool {
	return !remainingLeft(remaining) && !statusAllowed(status)
}

// remainingLeft reports whether a -remaining value is above 0.
func remainingLeft(remaining string) bool {
	v, ok := parseNumber(remaining)
	return ok && v > 0
}

// statusAllowed reports whether a -status value is "allowed…".
func statusAllowed(status string) bool {
	return strings.HasPrefix(strings.ToLower(status), "allowed")
}

// absoluteReset parses an RFC 3339 time or an epoch (seconds or ms).
func absoluteReset(s string, now time.Time) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return until(t, now), true
	}
	if v, ok := parseNumber(s); ok && v > 1e9 {
		return resetValue(s, time.Second, now)
	}
	return 0, false
}
