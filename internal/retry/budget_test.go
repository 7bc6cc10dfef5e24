package retry

import (
	"errors"
	"strings"
	"testing"
)

// gRFC A6's example: max_tokens 10, token_ratio 0.1. A full budget allows
// retries while more than 5 tokens remain: five retries, then refusals;
// ten successes buy one more.
func TestBudgetSpendAndRefill(t *testing.T) {
	b := Budget{MaxTokens: 10, TokenRatio: 0.1}
	level := b.Full()
	allowed := 0
	for range 20 {
		var ok bool
		if level, ok = b.Spend(level); ok {
			allowed++
		}
	}
	if allowed != 5 || level != 5*BudgetScale {
		t.Fatalf("allowed %d retries, level %d", allowed, level)
	}
	level = b.Add(level, 9)
	if _, ok := b.Spend(level); !ok {
		t.Fatalf("level %d (5.9 tokens) refused a retry", level)
	}
	level = b.Add(5*BudgetScale, 1000)
	if level != b.Full() {
		t.Fatalf("refill past the top: %d", level)
	}
	if Tokens(level) != 10 {
		t.Fatalf("Tokens = %v", Tokens(level))
	}
}

// token_ratio is kept to three decimals: 1000 successes at 0.0014 add 1
// token, not 1.4.
func TestBudgetRatioRounded(t *testing.T) {
	b := Budget{MaxTokens: 100, TokenRatio: 0.0014}
	if got := b.Add(0, 1000); got != 1000 {
		t.Fatalf("Add = %d", got)
	}
}

func TestBudgetValidate(t *testing.T) {
	for _, tc := range []struct {
		b     Budget
		field string
	}{
		{Budget{MaxTokens: 100, TokenRatio: 0.1}, ""},
		{Budget{MaxTokens: 1, TokenRatio: 1}, ""},
		{Budget{MaxTokens: 0, TokenRatio: 0.1}, "retry.budget.max_tokens"},
		{Budget{MaxTokens: 1001, TokenRatio: 0.1}, "retry.budget.max_tokens"},
		{Budget{MaxTokens: 10, TokenRatio: 0}, "retry.budget.token_ratio"},
		{Budget{MaxTokens: 10, TokenRatio: 0.0004}, "retry.budget.token_ratio"},
		{Budget{MaxTokens: 10, TokenRatio: 11}, "retry.budget.token_ratio"},
	} {
		err := tc.b.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.b, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+" ") || !errors.Is(err, ErrInvalidSettings) {
			t.Errorf("%+v: %v, want an error naming %s", tc.b, err, tc.field)
		}
	}
}

func TestOverLimitVerdict(t *testing.T) {
	v := Classify(failure("Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30,000, Requested 45,411. The input or output tokens must be reduced in order to run successfully.", status(429), code("rate_limit_exceeded"), hdr("retry-after", "1")), testNow)
	if !v.OverLimit || v.Class != ClassNotRetryable || v.Retryable || v.UsageWindow != 0 || v.Cooldown != 0 ||
		v.Reason != "request too large for the rate limit: 45,411 tokens requested, the limit is 30,000 — it can never succeed at this limit" {
		t.Fatalf("verdict = %+v", v)
	}
	// A throttle with the same numbers' shape is not over the limit.
	v = Classify(failure("Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms.", status(429)), testNow)
	if v.OverLimit || v.Class != ClassTransient {
		t.Fatalf("throttle verdict = %+v", v)
	}
	// Requested within the limit: not this rule (whatever else it is).
	v = Classify(failure("Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 300.", status(429)), testNow)
	if v.OverLimit {
		t.Fatalf("within the limit: %+v", v)
	}
}
