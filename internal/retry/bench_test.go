package retry_test

// Benchmarks of the retry engine's per-attempt work: classification, the
// provider hint, the backoff and the delay plan, and the whole decision the
// session makes for each failed attempt (Classify, then Plan). They run
// under `go test -bench` only (make bench); plain `go test` skips them.
//
//	go test -run '^$' -bench . -benchmem ./internal/retry

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/retry"
)

var benchNow = time.Date(2025, 8, 21, 12, 40, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// anthropicHeaders are the headers of a real Anthropic error answer.
func anthropicHeaders(extra ...string) http.Header {
	h := hdr(
		"content-type", "application/json",
		"request-id", "req_011CV5J4YZo4J3KLTDZgDN7S",
		"anthropic-ratelimit-requests-limit", "1000",
		"anthropic-ratelimit-requests-remaining", "999",
		"anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z",
		"anthropic-ratelimit-tokens-limit", "96000",
		"anthropic-ratelimit-tokens-remaining", "96000",
		"anthropic-ratelimit-tokens-reset", "2025-08-21T12:40:59Z",
	)
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return h
}

// benchFailures are failures as agentd's provider clients report them,
// from the cheapest to classify to the dearest.
var benchFailures = []struct {
	name string
	f    retry.Failure
}{
	{"anthropic-529-overloaded", retry.Failure{
		StopReason: "error", API: "anthropic", Status: 529, ErrorType: "overloaded_error",
		ErrorMessage: "529 overloaded_error: Overloaded", Headers: anthropicHeaders(),
	}},
	{"anthropic-429-retry-after", retry.Failure{
		StopReason: "error", API: "anthropic", Status: 429, ErrorType: "rate_limit_error",
		ErrorMessage: "429 rate_limit_error: Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.",
		Headers:      anthropicHeaders("retry-after", "2", "anthropic-ratelimit-tokens-remaining", "0"),
	}},
	{"openai-429-try-again-in", retry.Failure{
		StopReason: "error", API: "openai-responses", Status: 429, ErrorType: "tokens", ErrorCode: "rate_limit_exceeded",
		ErrorMessage: "429 tokens: Rate limit reached for gpt-4 in organization org-uVqpjtJiKqvVJMVfvpaounIh on tokens per min (TPM): Limit 10000, Used 8554, Requested 3082. Please try again in 9.816s. Visit https://platform.openai.com/account/rate-limits to learn more.",
		Headers: hdr("x-request-id", "req_test0001", "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-requests", "1s", "x-ratelimit-reset-tokens", "6m0s"),
	}},
	{"openai-usage-quota", retry.Failure{
		StopReason: "error", API: "openai-chat", Status: 429, ErrorType: "insufficient_quota", ErrorCode: "insufficient_quota",
		ErrorMessage: "429 insufficient_quota: You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
		Headers:      hdr("x-request-id", "req_test0002"),
	}},
	{"connection-reset", retry.Failure{
		StopReason: "error", API: "anthropic",
		ErrorMessage: "read tcp 127.0.0.1:52814->127.0.0.1:443: read: connection reset by peer",
	}},
	{"context-overflow", retry.Failure{
		StopReason: "error", API: "anthropic", Status: 400, ErrorType: "invalid_request_error",
		ErrorMessage: "400 invalid_request_error: prompt is too long: 205351 tokens > 200000 maximum", Headers: anthropicHeaders(),
	}},
	{"stale-replay", retry.Failure{
		StopReason: "error", API: "openai-responses", Status: 400, ErrorType: "invalid_request_error", ErrorCode: "previous_response_not_found",
		ErrorMessage: "400 invalid_request_error: Previous response with id 'resp_test0001' not found.",
	}},
	{"not-retryable-auth", retry.Failure{
		StopReason: "error", API: "anthropic", Status: 401, ErrorType: "authentication_error",
		ErrorMessage: "401 authentication_error: invalid x-api-key", Headers: anthropicHeaders(),
	}},
	{"long-message-64KiB", retry.Failure{
		StopReason: "error", API: "openai-chat", Status: 500,
		ErrorMessage: "500 server_error: " + strings.Repeat("the upstream returned something long and unhelpful; ", 1300),
	}},
}

var (
	sinkVerdict retry.Verdict
	sinkPlan    retry.DelayPlan
	sinkDur     time.Duration
	sinkBool    bool
)

// BenchmarkClassify is the classification of one failed attempt.
func BenchmarkClassify(b *testing.B) {
	for _, bf := range benchFailures {
		b.Run(bf.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkVerdict = retry.Classify(bf.f, benchNow)
			}
		})
	}
}

// BenchmarkParseHint is the provider's retry hint alone.
func BenchmarkParseHint(b *testing.B) {
	cases := []struct {
		name string
		h    http.Header
		msg  string
	}{
		{"retry-after-seconds", hdr("retry-after", "2"), ""},
		{"retry-after-ms", hdr("retry-after-ms", "1500"), ""},
		{"retry-after-http-date", hdr("retry-after", "Thu, 21 Aug 2025 12:41:00 GMT"), ""},
		{"wording-try-again-in", hdr("x-request-id", "req_1"), "Rate limit reached for gpt-4 on tokens per min (TPM): Limit 10000, Used 8554, Requested 3082. Please try again in 9.816s."},
		{"bucket-reset-headers", anthropicHeaders("anthropic-ratelimit-tokens-remaining", "0"), "Overloaded"},
		{"none", anthropicHeaders(), "Overloaded"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkDur, sinkBool = retry.ParseHint(c.h, c.msg, benchNow)
			}
		})
	}
}

// BenchmarkLocalDelay is the jittered exponential backoff.
func BenchmarkLocalDelay(b *testing.B) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		sinkDur = retry.LocalDelay(n%12+1, 500*time.Millisecond, 0.37)
	}
}

// BenchmarkPlan is the delay plan of a classified failure.
func BenchmarkPlan(b *testing.B) {
	s := retry.DefaultSettings()
	cases := []struct {
		name string
		in   retry.DelayInput
	}{
		{"transient-backoff", retry.DelayInput{Attempt: 3, Settings: s, U: 0.4,
			Verdict: retry.Classify(benchFailures[0].f, benchNow)}},
		{"provider-hint", retry.DelayInput{Attempt: 1, Settings: s, U: 0.4,
			Verdict: retry.Classify(benchFailures[1].f, benchNow)}},
		{"usage-sibling", retry.DelayInput{Attempt: 1, Settings: s, U: 0.4, HasSibling: true, SiblingFreeIn: 20 * time.Second,
			Verdict: retry.Classify(benchFailures[3].f, benchNow)}},
		{"switched", retry.DelayInput{Attempt: 2, Settings: s, U: 0.4, Switched: true,
			Verdict: retry.Classify(benchFailures[0].f, benchNow)}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkPlan = retry.Plan(c.in)
			}
		})
	}
}

// BenchmarkDecision is the whole retry decision of one failed attempt, as
// the session makes it: Classify, then Plan.
func BenchmarkDecision(b *testing.B) {
	s := retry.DefaultSettings()
	for _, bf := range benchFailures {
		b.Run(bf.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v := retry.Classify(bf.f, benchNow)
				sinkPlan = retry.Plan(retry.DelayInput{Attempt: 2, Settings: s, Verdict: v, U: 0.5})
			}
		})
	}
}
