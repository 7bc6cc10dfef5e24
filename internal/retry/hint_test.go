package retry

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

type hintCase struct {
	name string
	h    http.Header
	msg  string
	want time.Duration
	ok   bool
}

func TestParseHintHeaders(t *testing.T) {
	t.Parallel()
	runHintCases(t, headerHintCases())
}

func TestParseHintMessage(t *testing.T) {
	t.Parallel()
	runHintCases(t, messageHintCases())
}

// headerHintCases: every header form, absolute and relative, and malformed
// values.
func headerHintCases() []hintCase {
	epochS := testNow.Add(90 * time.Second).Unix()
	epochMs := testNow.Add(1500 * time.Millisecond).UnixMilli()
	return []hintCase{
		{"retry-after-ms", headers("retry-after-ms", "1500"), "", 1500 * time.Millisecond, true},
		{"retry-after-ms fractional", headers("retry-after-ms", "2.5"), "", 2500 * time.Microsecond, true},
		{"retry-after-ms huge is clamped", headers("retry-after-ms", "11180000000000"), "", MaxHint, true},
		{"retry-after-ms 11180000 (3h)", headers("retry-after-ms", "11180000"), "", 11180 * time.Second, true},
		{"x-ms-retry-after-ms", headers("x-ms-retry-after-ms", "750"), "", 750 * time.Millisecond, true},
		{"retry-after-ms wins over retry-after", headers("retry-after", "20", "retry-after-ms", "100"), "", 100 * time.Millisecond, true},
		{"retry-after seconds", headers("retry-after", "20"), "", 20 * time.Second, true},
		{"retry-after fractional", headers("retry-after", "1.5"), "", 1500 * time.Millisecond, true},
		{"retry-after zero", headers("retry-after", "0"), "", 0, true},
		{"retry-after spaces", headers("retry-after", " 7 "), "", 7 * time.Second, true},
		{"retry-after http date", headers("retry-after", testNow.Add(2*time.Minute).Format(http.TimeFormat)), "", 2 * time.Minute, true},
		{"retry-after rfc850 date", headers("retry-after", testNow.Add(time.Hour).Format(time.RFC850)), "", time.Hour, true},
		{"retry-after ansic date", headers("retry-after", testNow.Add(30*time.Second).Format(time.ANSIC)), "", 30 * time.Second, true},
		{"retry-after past date", headers("retry-after", testNow.Add(-time.Hour).Format(http.TimeFormat)), "", 0, true},
		{"retry-after far date clamped", headers("retry-after", testNow.AddDate(5, 0, 0).Format(http.TimeFormat)), "", MaxHint, true},
		{"retry-after 7999 (unified)", headers("retry-after", "7999"), "", 7999 * time.Second, true},
		{"x-ratelimit-reset-ms relative", headers("x-ratelimit-reset-ms", "250"), "", 250 * time.Millisecond, true},
		{"x-ratelimit-reset-ms epoch ms", headers("x-ratelimit-reset-ms", strconv.FormatInt(epochMs, 10)), "", 1500 * time.Millisecond, true},
		{"x-ratelimit-reset relative seconds", headers("x-ratelimit-reset", "30"), "", 30 * time.Second, true},
		{"x-ratelimit-reset epoch s", headers("x-ratelimit-reset", strconv.FormatInt(epochS, 10)), "", 90 * time.Second, true},
		{"x-ratelimit-reset epoch ms (OpenRouter)", headers("x-ratelimit-reset", strconv.FormatInt(epochMs, 10)), "", 1500 * time.Millisecond, true},
		{"x-ratelimit-reset past epoch", headers("x-ratelimit-reset", strconv.FormatInt(testNow.Add(-time.Minute).Unix(), 10)), "", 0, true},
		{"x-ratelimit-reset go duration", headers("x-ratelimit-reset", "6m0s"), "", 6 * time.Minute, true},
		{"x-ratelimit-reset-after", headers("x-ratelimit-reset-after", "12"), "", 12 * time.Second, true},
		{"x-ratelimit-reset absurd epoch", headers("x-ratelimit-reset", "99999999999999999999"), "", MaxHint, true},
		{"openai reset tokens go duration", headers("x-ratelimit-reset-tokens", "6m0s"), "", 6 * time.Minute, true},
		{"openai reset requests ms", headers("x-ratelimit-reset-requests", "12ms"), "", 12 * time.Millisecond, true},
		{"openai reset compound", headers("x-ratelimit-reset-tokens", "23h47m36.648s"), "", 23*time.Hour + 47*time.Minute + 36648*time.Millisecond, true},
		{"openai latest exhausted bucket wins", headers("x-ratelimit-reset-requests", "1s", "x-ratelimit-reset-tokens", "6m0s"), "", 6 * time.Minute, true},
		{"openai bucket with remaining skipped", headers("x-ratelimit-reset-requests", "1s", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-tokens", "6m0s", "x-ratelimit-remaining-tokens", "149984"), "", time.Second, true},
		{"openai all buckets remaining", headers("x-ratelimit-reset-tokens", "6m0s", "x-ratelimit-remaining-tokens", "10"), "", 0, false},
		{"anthropic token bucket reset", headers(
			"anthropic-ratelimit-tokens-reset", testNow.Add(59*time.Second).Format(time.RFC3339),
			"anthropic-ratelimit-tokens-remaining", "0",
			"anthropic-ratelimit-requests-reset", testNow.Add(2*time.Hour).Format(time.RFC3339),
			"anthropic-ratelimit-requests-remaining", "999",
		), "", 59 * time.Second, true},
		{"anthropic reset without remaining", headers("anthropic-ratelimit-input-tokens-reset", "2025-08-21T12:40:59Z"), "", 59 * time.Second, true},
		{"anthropic reset fractional", headers("anthropic-ratelimit-output-tokens-reset", "2025-08-21T12:40:01.5Z"), "", 1500 * time.Millisecond, true},
		{"anthropic unified epoch rejected", headers("anthropic-ratelimit-unified-5h-reset", strconv.FormatInt(testNow.Add(3*time.Hour).Unix(), 10), "anthropic-ratelimit-unified-5h-status", "rejected"), "", 3 * time.Hour, true},
		{"anthropic unified allowed skipped", headers("anthropic-ratelimit-unified-5h-reset", strconv.FormatInt(testNow.Add(3*time.Hour).Unix(), 10), "anthropic-ratelimit-unified-5h-status", "allowed"), "", 0, false},
		{"anthropic all buckets remaining", headers("anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z", "anthropic-ratelimit-requests-remaining", "999"), "", 0, false},
		{"retry header beats bucket resets", headers("retry-after", "3", "x-ratelimit-reset-tokens", "6m0s"), "", 3 * time.Second, true},
		{"lower-case non-canonical key", http.Header{"retry-after": {"4"}}, "", 4 * time.Second, true},
		{"upper-case non-canonical key", http.Header{"RETRY-AFTER-MS": {"40"}}, "", 40 * time.Millisecond, true},
		// malformed values are ignored
		{"retry-after negative", headers("retry-after", "-1"), "", 0, false},
		{"retry-after garbage", headers("retry-after", "soon"), "", 0, false},
		{"retry-after exponent", headers("retry-after", "1e3"), "", 0, false},
		{"retry-after NaN", headers("retry-after", "NaN"), "", 0, false},
		{"retry-after Inf", headers("retry-after", "Inf"), "", 0, false},
		{"retry-after hex", headers("retry-after", "0x10"), "", 0, false},
		{"retry-after empty", headers("retry-after", ""), "", 0, false},
		{"retry-after-ms garbage falls through", headers("retry-after-ms", "abc", "retry-after", "2"), "", 2 * time.Second, true},
		{"x-ratelimit-reset negative duration", headers("x-ratelimit-reset", "-5s"), "", 0, false},
		{"x-ratelimit-reset overflow duration", headers("x-ratelimit-reset", "9999999999999h"), "", 0, false},
		{"anthropic reset garbage", headers("anthropic-ratelimit-tokens-reset", "tomorrow"), "", 0, false},
		{"nil headers", nil, "", 0, false},
		{"empty headers", http.Header{}, "", 0, false},
	}
}

// messageHintCases: message wordings, precedence against headers, and
// wordings that are not hints.
func messageHintCases() []hintCase {
	return []hintCase{
		{"openai try again 9.816s", nil, "Rate limit reached for gpt-4 in organization org-x on tokens per min (TPM): Limit 10000, Used 8554, Requested 3082. Please try again in 9.816s. Visit https://platform.openai.com/account/rate-limits to learn more.", 9816 * time.Millisecond, true},
		{"openai try again 644ms", nil, "Please try again in 644ms.", 644 * time.Millisecond, true},
		{"openai try again 6ms", nil, "Limit: 10000 / min. Please try again in 6ms. Contact us", 6 * time.Millisecond, true},
		{"try again 1.4s", nil, "try again in 1.4s", 1400 * time.Millisecond, true},
		{"openai compound 4m48s", nil, "Please try again in 4m48s.", 4*time.Minute + 48*time.Second, true},
		{"openai compound 1h2m3.5s", nil, "Please try again in 1h2m3.5s.", time.Hour + 2*time.Minute + 3500*time.Millisecond, true},
		{"codex ~158 min", nil, "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in ~158 min.", 158 * time.Minute, true},
		{"try again minutes", nil, "Try again in 5 minutes", 5 * time.Minute, true},
		{"try again hours", nil, "try again in 2 hours", 2 * time.Hour, true},
		{"try again spoken compound", nil, "try again in 1 day 2 hours and 51 minutes.", 26*time.Hour + 51*time.Minute, true},
		{"try again comma", nil, "try again in 1 hour, 30 minutes", 90 * time.Minute, true},
		{"try again about", nil, "Please try again in about 20 seconds", 20 * time.Second, true},
		{"azure retry after seconds", nil, "Please retry after 6 seconds. Please go here: https://aka.ms/oai/quotaincrease", 6 * time.Second, true},
		{"azure try again 20 seconds", nil, "Rate limit is exceeded. Try again in 20 seconds.", 20 * time.Second, true},
		{"gemini please retry", nil, "Quota exceeded for metric: x, limit: 15 Please retry in 7.609416s.", 7609416 * time.Microsecond, true},
		{"gemini please retry ms", nil, "Please retry in 50ms", 50 * time.Millisecond, true},
		{"gemini retryDelay", nil, `{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}`, 7 * time.Second, true},
		{"gemini retryDelay fractional", nil, `"retryDelay":"0.05s"`, 50 * time.Millisecond, true},
		{"resets in hours", nil, "Your limit resets in 3 hours.", 3 * time.Hour, true},
		{"reset after go duration", nil, "Your quota will reset after 18h31m10s.", 18*time.Hour + 31*time.Minute + 10*time.Second, true},
		{"reset after minutes", nil, "quota will reset after 45m", 45 * time.Minute, true},
		{"resets at rfc3339", nil, "Limit reached; resets at 2025-08-21T13:00:00Z.", 20 * time.Minute, true},
		{"resets at offset", nil, "resets at 2025-08-21T14:40:00+01:00", time.Hour, true},
		{"available in", nil, "The model will be available in 30s", 30 * time.Second, true},
		{"retry-after-ms in text", nil, "429 rate limited retry-after-ms=11180000", 11180 * time.Second, true},
		{"retry-after in text", nil, "overloaded; retry-after: 20", 20 * time.Second, true},
		{"retry-after in text json", nil, `{"retry-after":"3"}`, 3 * time.Second, true},
		{"retry-after date in text", nil, "retry-after: " + testNow.Add(5*time.Minute).Format(http.TimeFormat), 5 * time.Minute, true},
		{"x-ratelimit-reset-ms in text", nil, "x-ratelimit-reset-ms=1200", 1200 * time.Millisecond, true},
		{"x-ratelimit-reset in text epoch", nil, "x-ratelimit-reset: " + strconv.FormatInt(testNow.Add(time.Minute).Unix(), 10), time.Minute, true},
		{"first usable anchor wins", nil, "retrying in a moment; try again in 2s", 2 * time.Second, true},
		{"message beats bucket reset headers", headers("x-ratelimit-reset-tokens", "6m0s"), "Please try again in 1.4s.", 1400 * time.Millisecond, true},
		{"headers beat message", headers("retry-after", "10"), "Please try again in 1.4s.", 10 * time.Second, true},
		{"huge spoken clamped", nil, "try again in 99999999999999999999999 hours", MaxHint, true},
		{"very long number clamped", nil, "try again in 1000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000 s", MaxHint, true},
		// not hints
		{"try again later", nil, "Please try again later.", 0, false},
		{"try again no unit", nil, "try again in 5", 0, false},
		{"try again zero", nil, "try again in 0s", 0, false},
		{"wait before trying again", nil, "Too many requests, please wait before trying again.", 0, false},
		{"unit word not a unit", nil, "try again in 5 tokens", 0, false},
		{"empty", nil, "", 0, false},
		{"retry-after negative in text", nil, "retry-after: -5", 0, false},
		{"retryDelay zero", nil, `"retryDelay": "0s"`, 0, false},
		{"number glued to word", nil, "try again in 5minutesish", 0, false},
	}
}

func runHintCases(t *testing.T, cases []hintCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseHint(tc.h, tc.msg, testNow)
			if got != tc.want || ok != tc.ok {
				t.Errorf("ParseHint(%v, %q) = %v, %v; want %v, %v", tc.h, tc.msg, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestSpokenDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"5s":                    5 * time.Second,
		" ~ 3 mins":             3 * time.Minute,
		"approximately 2 hours": 2 * time.Hour,
		"1.5 hrs and":           90 * time.Minute,
		"2 days":                48 * time.Hour,
		"3 msec":                3 * time.Millisecond,
		"10 s, then":            10 * time.Second,
	} {
		got, ok := spokenDuration(in)
		if !ok || got != want {
			t.Errorf("spokenDuration(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "soon", "5", "5 x", "-5s", ".5s"} {
		if got, ok := spokenDuration(in); ok {
			t.Errorf("spokenDuration(%q) = %v, true; want false", in, got)
		}
	}
}
