package retry

import (
	"net/http"
	"testing"
	"time"
)

func TestPaceFromHeaders(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		h      http.Header
		wait   time.Duration
		bucket string
	}{
		{"anthropic requests at 0, reset a date", h(
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", "2026-12-01T12:00:12Z",
			"anthropic-ratelimit-tokens-remaining", "38000", "anthropic-ratelimit-tokens-reset", "2026-12-01T12:00:01Z"),
			12 * time.Second, "anthropic-ratelimit-requests-remaining"},
		{"anthropic input tokens at 0", h(
			"anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-reset", "2026-12-01T12:00:30.5Z"),
			30500 * time.Millisecond, "anthropic-ratelimit-input-tokens-remaining"},
		{"openai tokens at 0, reset a duration", h(
			"x-ratelimit-limit-tokens", "30000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s",
			"x-ratelimit-remaining-requests", "499", "x-ratelimit-reset-requests", "120ms"),
			6 * time.Minute, "x-ratelimit-remaining-tokens"},
		{"openai both at 0: the longer", h(
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1s",
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20ms"),
			time.Second, "x-ratelimit-remaining-tokens"},
		{"openai reset in seconds", h("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "2.5"),
			2500 * time.Millisecond, "x-ratelimit-remaining-requests"},
		{"capacity left", h("x-ratelimit-remaining-tokens", "12", "x-ratelimit-reset-tokens", "6m0s",
			"anthropic-ratelimit-requests-remaining", "1", "anthropic-ratelimit-requests-reset", "2026-12-01T12:00:12Z"), 0, ""},
		{"0 without a reset", h("x-ratelimit-remaining-tokens", "0"), 0, ""},
		{"reset in the past", h("anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2026-12-01T11:59:00Z"), 0, ""},
		{"no headers", nil, 0, ""},
	} {
		p, ok := PaceFromHeaders(tc.h, now)
		if ok != (tc.bucket != "") || p.Wait != tc.wait || p.Bucket != tc.bucket {
			t.Errorf("%s: %+v, %v; want %v on %q", tc.name, p, ok, tc.wait, tc.bucket)
		}
	}
}
