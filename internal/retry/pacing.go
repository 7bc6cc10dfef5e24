package retry

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Pace is what a successful response's rate-limit headers say of its
// credential: a bucket with 0 remaining, and when it refills. The next
// call with that credential would get a 429, so the session treats it as
// blocked until then (reason "paced") and calls with a sibling, or waits.
type Pace struct {
	// Wait is how long until the exhausted bucket resets (the longest, when
	// several are exhausted), in (0, DefaultUsageWindow].
	Wait time.Duration
	// Bucket names the exhausted bucket's remaining header, e.g.
	// "anthropic-ratelimit-requests-remaining" or
	// "x-ratelimit-remaining-tokens".
	Bucket string
}

// PaceFromHeaders reads the rate-limit headers of a successful response,
// in both providers' forms:
//
//   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-remaining, with -reset an RFC 3339 date (or an epoch);
//   - OpenAI: x-ratelimit-remaining-{requests,tokens}, with
//     x-ratelimit-reset-{requests,tokens} a duration ("6m0s", "20ms", or
//     seconds).
//
// ok is false unless some bucket's remaining is exactly 0 and its reset is
// in the future. It is pure: now is the clock of date resets.
func PaceFromHeaders(h http.Header, now time.Time) (p Pace, ok bool) {
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		name := strings.ToLower(k)
		var reset time.Duration
		var found bool
		switch {
		case strings.HasPrefix(name, "anthropic-ratelimit-") && strings.HasSuffix(name, "-remaining"):
			if !zero(vs[0]) {
				continue
			}
			bucket := strings.TrimSuffix(name, "-remaining")
			reset, found = absoluteReset(headerValue(h, bucket+"-reset"), now)
		case strings.HasPrefix(name, "x-ratelimit-remaining-"):
			if !zero(vs[0]) {
				continue
			}
			bucket := strings.TrimPrefix(name, "x-ratelimit-remaining-")
			reset, found = resetValue(headerValue(h, "x-ratelimit-reset-"+bucket), time.Second, now)
		default:
			continue
		}
		if !found || reset <= 0 {
			continue
		}
		reset = min(reset, DefaultUsageWindow)
		if !ok || reset > p.Wait {
			p, ok = Pace{Wait: reset, Bucket: name}, true
		}
	}
	return p, ok
}

// zero reports whether a remaining count is exactly 0.
func zero(s string) bool {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return err == nil && n == 0
}
