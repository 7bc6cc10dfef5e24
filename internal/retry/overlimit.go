package retry

import (
	"regexp"
	"strconv"
	"strings"
)

// A request larger than the provider's rate limit (docs/retry-policy.md
// §1.9) can never succeed at that limit, however long agentd waits and
// whichever sibling credential of the same tier it uses: a per-minute
// bucket never holds more than the limit. It is a final error, not a
// throttle (retrying it is wasted) and not a usage limit (blocking the
// credential would not help) — nor a context overflow: the model's
// context may well take it, and a larger-context fallback would not help.
//
//   - OpenAI (429) and Groq (413, sometimes 429) say so outright: "Request
//     too large for gpt-4o in organization org-… on tokens per min (TPM):
//     Limit 30000, Requested 45411. The input or output tokens must be
//     reduced in order to run successfully." and "Request too large for
//     model `llama-3.3-70b-versatile` in organization `org_…` service tier
//     `on_demand` on tokens per minute (TPM): Limit 12000, Requested 14137,
//     please reduce your message size and try again." — over the limit when
//     Requested > Limit (a message without the numbers counts as over).
//   - Anthropic (429 rate_limit_error) words a request over the limit as it
//     words any other: "This request would exceed the rate limit for your
//     organization (…) of 30,000 input tokens per minute." Its rate-limit
//     headers tell the two apart: when the bucket the message names
//     (input, output or all tokens) was full — anthropic-ratelimit-
//     <kind>-remaining equal to its -limit — and the request was still
//     refused, the request alone is larger than the bucket. Without the
//     headers, or with a bucket partly spent, it stays a rate limit: the
//     retry after the wait then meets a full bucket and ends here.

var (
	// overLimitOpenAIRE: the OpenAI / Groq wording, on the lowered text.
	overLimitOpenAIRE = regexp.MustCompile(`request too large for .{0,200}? on (tokens|requests) per (?:min(?:ute)?|day)`)
	// overLimitNumbersRE: "Limit 30000, Requested 45411" (Groq may write
	// "Requested ~4251").
	overLimitNumbersRE = regexp.MustCompile(`limit (\d+(?:,\d{3})*), requested ~?(\d+(?:,\d{3})*)`)
	// overLimitAnthropicRE: the Anthropic wordings of a refused token
	// bucket, and which bucket.
	overLimitAnthropicRE = regexp.MustCompile(`(?:would exceed the rate limit for your organization|exceeded your (?:organization's )?(?:per-minute )?rate limit).{0,200}?\b(input tokens|output tokens|tokens) per minute`)
)

// anthropicBuckets maps the bucket an Anthropic message names to its
// rate-limit headers.
var anthropicBuckets = map[string][2]headerName{
	"input tokens":  {newHeaderName("anthropic-ratelimit-input-tokens-limit"), newHeaderName("anthropic-ratelimit-input-tokens-remaining")},
	"output tokens": {newHeaderName("anthropic-ratelimit-output-tokens-limit"), newHeaderName("anthropic-ratelimit-output-tokens-remaining")},
	"tokens":        {newHeaderName("anthropic-ratelimit-tokens-limit"), newHeaderName("anthropic-ratelimit-tokens-remaining")},
}

// overLimit recognises a request larger than the provider's rate limit.
func (c *facts) overLimit() (string, bool) {
	lower := c.lower
	if strings.Contains(lower, "request too large for") {
		if m := overLimitOpenAIRE.FindStringSubmatch(lower); m != nil {
			if n := overLimitNumbersRE.FindStringSubmatch(lower); n != nil {
				limit, lok := parseCount(n[1])
				req, rok := parseCount(n[2])
				if lok && rok && req <= limit {
					return "", false
				}
				return "request too large for the rate limit: " + n[2] + " " + m[1] + " requested, the limit is " + n[1] + " — it can never succeed at this limit", true
			}
			return "request too large for the " + m[1] + " rate limit — it can never succeed at this limit", true
		}
	}
	if c.textStatus != 429 && c.typ != "rate_limit_error" {
		return "", false
	}
	// The headers first (a few map reads): without a full bucket the
	// message is an ordinary rate limit, whatever its wording, and the
	// pattern (a scan of the whole message) need not run.
	if !c.anyBucketFull() || !strings.Contains(lower, "per minute") {
		return "", false
	}
	m := overLimitAnthropicRE.FindStringSubmatch(lower)
	if m == nil {
		return "", false
	}
	names := anthropicBuckets[m[1]]
	limit, lok := parseCount(c.hdrs.get(names[0]))
	left, rok := parseCount(c.hdrs.get(names[1]))
	if !lok || !rok || limit <= 0 || left < limit {
		return "", false
	}
	return "the request alone exceeds the rate limit of " + strconv.FormatInt(limit, 10) + " " + m[1] + " per minute (refused with the bucket full: " +
		names[1].lower + " = " + strconv.FormatInt(left, 10) + ") — it can never succeed at this limit", true
}

// anyBucketFull reports whether one of the Anthropic token buckets the
// headers describe is full (remaining equal to its limit).
func (c *facts) anyBucketFull() bool {
	for _, names := range anthropicBuckets {
		limit, lok := parseCount(c.hdrs.get(names[0]))
		left, rok := parseCount(c.hdrs.get(names[1]))
		if lok && rok && limit > 0 && left >= limit {
			return true
		}
	}
	return false
}

// parseCount reads a count such as "30000" or "30,000".
func parseCount(s string) (int64, bool) {
	s = strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}
