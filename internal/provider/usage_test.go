package provider

import (
	"math"
	"testing"
)

func TestPriceCost(t *testing.T) {
	// claude-sonnet-4-5's list price: $3 in, $15 out, $0.30 cache read,
	// $3.75 cache write per million tokens.
	p := Price{InputPerMTok: 3, OutputPerMTok: 15, CacheReadPerMTok: 0.3, CacheWritePerMTok: 3.75}
	for _, tc := range []struct {
		u    Usage
		want float64
	}{
		{Usage{}, 0},
		{Usage{InputTokens: 1_000_000}, 3},
		{Usage{OutputTokens: 1_000_000}, 15},
		{Usage{CacheReadTokens: 1_000_000}, 0.3},
		{Usage{CacheWriteTokens: 1_000_000}, 3.75},
		// 12·3 + 95·15 + 24000·0.3 + 1800·3.75 = 36 + 1425 + 7200 + 6750 = 15411 µ$.
		{Usage{InputTokens: 12, OutputTokens: 95, CacheReadTokens: 24000, CacheWriteTokens: 1800}, 0.015411},
		// Reasoning tokens are part of output: not priced twice.
		{Usage{OutputTokens: 1000, ReasoningTokens: 800}, 0.015},
	} {
		if got := p.Cost(tc.u); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Cost(%+v) = %.9f, want %.9f", tc.u, got, tc.want)
		}
	}
}

func TestUsageAdd(t *testing.T) {
	u := Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheWriteTokens: 4, ReasoningTokens: 1}
	u.Add(Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 30, CacheWriteTokens: 40, ReasoningTokens: 10})
	if want := (Usage{InputTokens: 11, OutputTokens: 22, CacheReadTokens: 33, CacheWriteTokens: 44, ReasoningTokens: 11}); u != want {
		t.Errorf("sum = %+v, want %+v", u, want)
	}
	if u.PromptTokens() != 88 || u.Total() != 110 || u.IsZero() || !(Usage{}).IsZero() {
		t.Errorf("prompt %d total %d zero %v", u.PromptTokens(), u.Total(), u.IsZero())
	}
}
