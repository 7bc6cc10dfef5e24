package retry

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The fuzzers check that nothing panics and that every result stays within
// its documented bounds: hints in [0, MaxHint], classes from the closed set,
// Retryable consistent with the class, delays non-negative. Run them with
//
//	go test -run '^$' -fuzz FuzzParseHint -fuzztime 30s ./internal/retry/
//	go test -run '^$' -fuzz FuzzClassify -fuzztime 30s ./internal/retry/
//	go test -run '^$' -fuzz FuzzPlan -fuzztime 30s ./internal/retry/
//	go test -run '^$' -fuzz FuzzParseHintHeaders -fuzztime 30s ./internal/retry/

var validClasses = map[Class]bool{
	ClassTransient: true, ClassUsageLimit: true, ClassContextOverflow: true,
	ClassStaleReplay: true, ClassRefusal: true, ClassNotRetryable: true,
}

func checkHint(t *testing.T, what string, d time.Duration, ok bool) {
	t.Helper()
	if d < 0 || d > MaxHint {
		t.Fatalf("%s: hint %v outside [0, %v]", what, d, MaxHint)
	}
	if !ok && d != 0 {
		t.Fatalf("%s: no hint but duration %v", what, d)
	}
}

func FuzzParseHint(f *testing.F) {
	for _, tc := range append(headerHintCases(), messageHintCases()...) {
		for k, vs := range tc.h {
			for _, v := range vs {
				f.Add(k, v, tc.msg, testNow.Unix())
			}
		}
		if len(tc.h) == 0 {
			f.Add("retry-after", "", tc.msg, testNow.Unix())
		}
	}
	f.Add("x-ratelimit-reset", "1e308", "try again in 1e308s", int64(math.MaxInt64))
	f.Add("anthropic-ratelimit-x-reset", "9999-12-31T23:59:59Z", "resets at 0001-01-01T00:00:00Z", int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, name, value, msg string, nowUnix int64) {
		now := time.Unix(nowUnix, 0)
		h := http.Header{name: {value}}
		d, ok := ParseHint(h, msg, now)
		checkHint(t, "ParseHint", d, ok)
		if d2, ok2 := ParseHint(h, msg, now); d2 != d || ok2 != ok {
			t.Fatalf("ParseHint not deterministic: %v,%v then %v,%v", d, ok, d2, ok2)
		}
		d, ok = ParseHint(nil, msg, now)
		checkHint(t, "ParseHint(nil)", d, ok)
		d, ok = ParseHint(h, "", now)
		checkHint(t, "ParseHint(headers only)", d, ok)
	})
}

// fuzzHeaders reads "Name: value" lines into a header map, names as written
// (any case, any bytes: what a provider's proxy may send). A line without a
// colon is a name with an empty value.
func fuzzHeaders(lines string) http.Header {
	h := http.Header{}
	for _, line := range strings.Split(lines, "\n") {
		k, v, _ := strings.Cut(line, ":")
		h[k] = append(h[k], v)
	}
	return h
}

// FuzzParseHintHeaders gives ParseHint whole header maps: several headers,
// each name in any spelling and repeated, with the bucket headers
// (-remaining, -status) that decide which resets count. Besides the bounds,
// the header view's fast paths must answer as the plain look-ups they stand
// for, whatever the map's iteration order.
func FuzzParseHintHeaders(f *testing.F) {
	for _, seed := range []struct{ headers, msg string }{
		{"retry-after: 20", ""},
		{"Retry-After: Thu, 21 Aug 2025 12:41:00 GMT", ""},
		{"retry-after-ms: 1500.5\nretry-after: 3", ""},
		{"X-Ms-Retry-After-Ms: 250", ""},
		{"x-ratelimit-reset: 1755780060\nx-ratelimit-reset-ms: 1755780060000", ""},
		{"x-ratelimit-reset-after: 6m0s", ""},
		{"x-ratelimit-reset-tokens: 6m0s\nx-ratelimit-remaining-tokens: 0\nx-ratelimit-reset-requests: 1s\nx-ratelimit-remaining-requests: 5", "try again in 9.8s"},
		{"anthropic-ratelimit-tokens-reset: 2025-08-21T12:40:59Z\nanthropic-ratelimit-tokens-remaining: 0", ""},
		{"anthropic-ratelimit-unified-reset: 1755780060\nanthropic-ratelimit-unified-status: rejected\nanthropic-ratelimit-unified-5h-reset: 1755790060\nanthropic-ratelimit-unified-5h-status: allowed_warning", ""},
		{"ANTHROPIC-RATELIMIT-TOKENS-RESET: 2025-08-21T13:00:00Z\nAnthropic-Ratelimit-Tokens-Reset: 2025-08-21T12:50:00Z", ""},
		{"retry-after: \nRetry-After: 7\nRETRY-AFTER: 9", ""},
		{"retry-after-m\u017f: 5\n\u212aey: 1\nx-ratelimit-re\u017fet-tokens: 1m", ""},
		{"x-ratelimit-reset-: 5\nx-ratelimit-remaining-: 0\nx-ratelimit-reset-msx: 2", ""},
		{"anthropic-ratelimit-a b-reset: 1755780060\nanthropic-ratelimit-a b-remaining: 3", ""},
		{"retry-after: 1e308\nx-ratelimit-reset: 99999999999999999999", "resets at 9999-12-31T23:59:59Z"},
		{"retry-after: -1\nx-ratelimit-reset: +5\nx-ratelimit-reset-after: -6m", "retry-after: 12"},
		{"", "Rate limited. Please retry after 2 hours and 5 minutes"},
		{"content-type: application/json", `{"error":{"details":[{"retryDelay":"7s"}]}}`},
	} {
		f.Add(seed.headers, seed.msg, testNow.Unix())
	}
	f.Fuzz(func(t *testing.T, lines, msg string, nowUnix int64) {
		h := fuzzHeaders(lines)
		now := time.Unix(nowUnix, 0)
		d, ok := ParseHint(h, msg, now)
		checkHint(t, "ParseHint", d, ok)
		for range 2 {
			if d2, ok2 := ParseHint(h, msg, now); d2 != d || ok2 != ok {
				t.Fatalf("ParseHint(%q) not deterministic: %v,%v then %v,%v", lines, d, ok, d2, ok2)
			}
		}
		// The plain look-ups: headerValue and the general bucket loop.
		pd, pok := parseHint(headerView{h: h}, prepareMessage(msg, false), now)
		if pd != d || pok != ok {
			t.Fatalf("ParseHint(%q, %q) = %v,%v; with the plain look-ups %v,%v", lines, msg, d, ok, pd, pok)
		}
		v := viewHeaders(h)
		for _, name := range []string{"retry-after", "retry-after-ms", "x-ratelimit-reset", "x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-remaining"} {
			want := headerValue(h, name)
			if got := v.get(newHeaderName(name)); got != want {
				t.Fatalf("get(%q) in %q = %q, headerValue says %q", name, lines, got, want)
			}
			if got := v.getBytes([]byte(name)); got != want {
				t.Fatalf("getBytes(%q) in %q = %q, headerValue says %q", name, lines, got, want)
			}
		}
		bd, bok := hintFromBucketResets(v, now)
		wd, wok := hintFromBucketResetsAnyKeys(h, now)
		if bd != wd || bok != wok {
			t.Fatalf("hintFromBucketResets(%q) = %v %v, the general loop says %v %v", lines, bd, bok, wd, wok)
		}
	})
}

func FuzzClassify(f *testing.F) {
	for _, tc := range classifyCases {
		ra := ""
		if tc.f.Headers != nil {
			ra = tc.f.Headers.Get("Retry-After")
		}
		f.Add(tc.f.ErrorMessage, tc.f.Status, tc.f.ErrorType, tc.f.ErrorCode, tc.f.StopDetails, tc.f.API, tc.f.StopReason, tc.f.ObservableOutput, ra)
	}
	f.Fuzz(func(t *testing.T, msg string, status int, errType, errCode, stopDetails, apiKind, stopReason string, observable bool, retryAfter string) {
		fl := Failure{
			StopReason: stopReason, ErrorMessage: msg, StopDetails: stopDetails, API: apiKind,
			Status: status, ErrorType: errType, ErrorCode: errCode, ObservableOutput: observable,
			Headers: http.Header{"Retry-After": {retryAfter}},
		}
		v := Classify(fl, testNow)
		if !validClasses[v.Class] || !validClasses[v.Underlying] {
			t.Fatalf("Classify(%+v): class %q underlying %q", fl, v.Class, v.Underlying)
		}
		if v.Retryable != v.Class.Retryable() {
			t.Fatalf("Classify(%+v): retryable %v for class %s", fl, v.Retryable, v.Class)
		}
		checkHint(t, "Classify hint", v.Hint, v.HasHint)
		if v.UsageWindow < 0 || v.UsageWindow > MaxHint || v.Cooldown < 0 || v.Cooldown > MaxHint {
			t.Fatalf("Classify(%+v): window %v cooldown %v out of bounds", fl, v.UsageWindow, v.Cooldown)
		}
		if v.Reason == "" {
			t.Fatalf("Classify(%+v): empty reason", fl)
		}
		if v.Retryable && (stopReason != "error" || len(msg) == 0) {
			t.Fatalf("Classify(%+v): retryable without stopReason error and a message", fl)
		}
		if v.Retryable && observable && v.Class != ClassRefusal {
			t.Fatalf("Classify(%+v): retryable after observable output", fl)
		}
		p := Plan(DelayInput{Attempt: 3, Settings: DefaultSettings(), Verdict: v, U: 0.5})
		if p.Delay < 0 || p.Delay > MaxHint {
			t.Fatalf("Plan: delay %v out of bounds", p.Delay)
		}
		if again := Classify(fl, testNow); again != v {
			t.Fatalf("Classify not deterministic: %+v then %+v", v, again)
		}
	})
}

func FuzzPlan(f *testing.F) {
	f.Add(1, int64(500*time.Millisecond), int64(5*time.Minute), 0.5, int64(20*time.Second), true, "transient", false, int64(2*time.Second), true)
	f.Add(math.MaxInt, int64(math.MaxInt64), int64(-1), math.NaN(), int64(math.MaxInt64), true, "usage_limit", false, int64(math.MaxInt64), true)
	f.Add(-5, int64(-1), int64(0), -3.0, int64(math.MinInt64), false, "usage_limit", false, int64(math.MinInt64), true)
	f.Add(3, int64(1), int64(1), 2.0, int64(0), true, "stale_replay", true, int64(0), false)
	f.Add(3, int64(1), int64(1), 0.0, int64(0), false, "refusal", false, int64(0), false)
	f.Fuzz(func(t *testing.T, attempt int, base, maxDelay int64, u float64, hint int64, hasHint bool, class string, switched bool, sibling int64, hasSibling bool) {
		in := DelayInput{
			Attempt:       attempt,
			Settings:      Settings{BaseDelay: time.Duration(base), MaxDelay: time.Duration(maxDelay)},
			Verdict:       Verdict{Class: Class(class), Hint: time.Duration(hint), HasHint: hasHint},
			U:             u,
			Switched:      switched,
			SiblingFreeIn: time.Duration(sibling),
			HasSibling:    hasSibling,
		}
		p := Plan(in)
		if p.Delay < 0 {
			t.Fatalf("Plan(%+v) = %+v: negative delay", in, p)
		}
		if switched && (p.Delay != 0 || p.ExceedsMax) {
			t.Fatalf("Plan(%+v) = %+v: a switch must give 0 and never exceed", in, p)
		}
		if p.ExceedsMax != (maxDelay > 0 && p.Delay > time.Duration(maxDelay)) {
			t.Fatalf("Plan(%+v) = %+v: ExceedsMax inconsistent", in, p)
		}
		if p.Delay < LocalDelay(attempt, time.Duration(base), u) && !p.NoRetry && p.Source != SourceSwitch && p.Source != SourceStaleReplay {
			t.Fatalf("Plan(%+v) = %+v: below the local backoff", in, p)
		}
		d := LocalDelay(attempt, time.Duration(base), u)
		if d < 0 || d > MaxLocalDelay {
			t.Fatalf("LocalDelay(%d, %d, %v) = %v", attempt, base, u, d)
		}
	})
}
