package retry

import (
	"math"
	"time"
)

// MaxLocalDelay caps the local exponential backoff before jitter
// (RETRY_BACKOFF_MAX_DELAY_MS in the reference). It is a constant, not a
// setting.
const MaxLocalDelay = 8 * time.Second

// JitterRatio is the share of the nominal delay that jitter may take away: a
// local sleep is 75–100 % of the nominal value ("Anthropic-style" jitter), so
// that concurrent sessions do not retry in lockstep.
const JitterRatio = 0.25

// NominalDelay is the local backoff before jitter:
// min(max(0, base) · 2^(attempt−1), MaxLocalDelay). attempt is 1-based; values
// below 1 count as 1. It never overflows: the cap is checked before shifting.
func NominalDelay(attempt int, base time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	if attempt < 1 {
		attempt = 1
	}
	shift := uint(attempt - 1)
	if shift >= 62 || base > MaxLocalDelay>>shift {
		return MaxLocalDelay
	}
	return base << shift
}

// LocalDelay is the capped, jittered local backoff of docs/retry-policy.md
// §2.1 (§5 step 6): NominalDelay(attempt, base) · (0.75 + 0.25·u), with u a
// draw in [0, 1) from an injected random source (u outside [0, 1], or NaN,
// is clamped: NaN and negatives to 0, above 1 to 1). The result is in
// [0.75, 1] × nominal (truncated to the nanosecond), so at most
// MaxLocalDelay.
//
// The reference writes the factor as (1 − 0.25·U); both map a uniform draw
// onto the same 75–100 % range, here u = 0 gives the shortest sleep.
func LocalDelay(attempt int, base time.Duration, u float64) time.Duration {
	n := NominalDelay(attempt, base)
	switch {
	case math.IsNaN(u) || u < 0:
		u = 0
	case u > 1:
		u = 1
	}
	return time.Duration(float64(n) * (1 - JitterRatio + JitterRatio*u))
}
