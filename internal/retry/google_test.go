package retry

import (
	"strings"
	"testing"
	"time"
)

func TestUntilPacificMidnight(t *testing.T) {
	for _, tc := range []struct {
		now, want string
	}{
		{"2025-08-21T12:40:00Z", "2025-08-22T07:00:00Z"}, // PDT (UTC-7)
		{"2025-08-22T06:59:59Z", "2025-08-22T07:00:00Z"}, // a second before midnight PDT
		{"2025-08-22T07:00:00Z", "2025-08-23T07:00:00Z"}, // midnight itself: the next one
		{"2025-01-15T20:00:00Z", "2025-01-16T08:00:00Z"}, // PST (UTC-8)
		{"2025-03-09T09:00:00Z", "2025-03-10T07:00:00Z"}, // 01:00 PST on the day DST starts: next midnight is PDT
		{"2025-11-02T06:00:00Z", "2025-11-02T07:00:00Z"}, // 23:00 PDT on Nov 1: midnight PDT
		{"2025-11-02T12:00:00Z", "2025-11-03T08:00:00Z"}, // 04:00 PST on the day DST ends
		{"2025-12-31T23:30:00Z", "2026-01-01T08:00:00Z"}, // 15:30 PST on New Year's Eve
	} {
		now, _ := time.Parse(time.RFC3339, tc.now)
		want, _ := time.Parse(time.RFC3339, tc.want)
		if got := now.Add(untilPacificMidnight(now)); !got.Equal(want) {
			t.Errorf("untilPacificMidnight(%s) reaches %s, want %s", tc.now, got.UTC().Format(time.RFC3339), tc.want)
		}
	}
}

func TestParseProtoDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"45.837906927s": 45837906927 * time.Nanosecond,
		"26s":           26 * time.Second,
		"0.5s":          500 * time.Millisecond,
		"0s":            0,
	} {
		if got, ok := parseProtoDuration(in); !ok || got != want {
			t.Errorf("parseProtoDuration(%q) = %v, %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "s", "45", "-1s", "1e3s", "1m", "90000s", "abc"} {
		if _, ok := parseProtoDuration(in); ok {
			t.Errorf("parseProtoDuration(%q) accepted", in)
		}
	}
}

func TestGeminiHints(t *testing.T) {
	// RetryInfo is the hint: a per-minute quota is retried after it.
	v := Classify(failure(geminiMsg429, status(429), typ("RESOURCE_EXHAUSTED"), body(geminiBodyPerMinute)), testNow)
	if v.Class != ClassTransient || !v.HasHint || v.Hint != 45837906927*time.Nanosecond || v.Cooldown != v.Hint {
		t.Errorf("per-minute: %+v", v)
	}
	// A retry-after header outranks the body.
	v = Classify(failure(geminiMsg429, status(429), typ("RESOURCE_EXHAUSTED"), body(geminiBodyPerMinute), hdr("Retry-After", "7")), testNow)
	if v.Hint != 7*time.Second {
		t.Errorf("header first: %+v", v)
	}
	// A per-day quota blocks until midnight Pacific (testNow is 05:40
	// PDT: 18h20m), also when RetryInfo asks for less.
	perDayWithDelay := strings.Replace(geminiBodyPerMinute, "GenerateContentInputTokensPerModelPerMinute-FreeTier", "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 1)
	for _, b := range []string{geminiBodyPerDay, perDayWithDelay} {
		v = Classify(failure(geminiMsg429, status(429), typ("RESOURCE_EXHAUSTED"), body(b)), testNow)
		if v.Class != ClassUsageLimit || v.Hint != 18*time.Hour+20*time.Minute || v.UsageWindow != v.Hint || v.UsageWindowEstimated ||
			!strings.Contains(v.Reason, "GenerateRequestsPerDayPerProjectPerModel-FreeTier") {
			t.Errorf("per-day: %+v", v)
		}
	}
	// A body without google.rpc details, or too large, says nothing.
	if g := parseGoogleBody(`{"error":{"code":429}}`); g != (googleFacts{}) {
		t.Errorf("no details: %+v", g)
	}
	if g := parseGoogleBody(strings.Replace(geminiBodyPerDay, `"code":429`, `"pad":"`+strings.Repeat("x", maxGoogleBody)+`","code":429`, 1)); g.perDay != "" {
		t.Errorf("oversized body parsed")
	}
	// After observable output, not retried (but the window is known).
	v = Classify(failure(geminiMsg429, status(200), typ("RESOURCE_EXHAUSTED"), body(geminiBodyPerDay), observable()), testNow)
	if v.Class != ClassNotRetryable || v.Underlying != ClassUsageLimit {
		t.Errorf("after output: %+v", v)
	}
}
