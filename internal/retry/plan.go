package retry

import "time"

// SiblingBuffer is added to the earliest sibling credential's unblock time so
// that the next attempt lands after the block has lapsed
// (SIBLING_UNBLOCK_BUFFER_MS in the reference).
const SiblingBuffer = time.Second

// DelaySource says where a planned delay came from. It decides the wording of
// the final error when the delay exceeds retry.max_delay_ms: only
// SourceProvider may be reported as "Provider requested"; an estimate is
// agentd's own.
type DelaySource string

// The delay sources of [Plan].
const (
	// SourceEstimate: agentd's own value — the local backoff, or the estimated
	// usage-limit window when the provider gave no hint.
	SourceEstimate DelaySource = "estimate"
	// SourceProvider: the provider's retry hint won.
	SourceProvider DelaySource = "provider"
	// SourceSibling: a usage limit waits for the earliest blocked sibling
	// credential to free up (plus SiblingBuffer).
	SourceSibling DelaySource = "sibling"
	// SourceSwitch: a credential or model switch succeeded; retry at once.
	SourceSwitch DelaySource = "switch"
	// SourceStaleReplay: a stale Responses replay retries at once after the
	// provider session was reset.
	SourceStaleReplay DelaySource = "stale_replay"
	// SourceNone: no retry is planned (a refusal without a model switch).
	SourceNone DelaySource = "none"
)

// String returns the source's name.
func (s DelaySource) String() string { return string(s) }

// DelayInput is what Plan needs: the attempt (after the increment of Flow step
// 3, 1-based), the effective settings, the classifier's verdict, a jitter draw
// and the outcome of the session's credential and model switching.
type DelayInput struct {
	Attempt  int
	Settings Settings
	Verdict  Verdict
	U        float64 // jitter draw in [0,1)
	// Switched: a credential switch (or banked-reset redeem) or a model
	// fallback succeeded; the delay is forced to 0.
	Switched bool
	// SiblingFreeIn, with HasSibling: for a usage limit without a switch, the
	// time until the earliest blocked sibling credential frees up, before
	// SiblingBuffer. Negative values count as 0.
	SiblingFreeIn time.Duration
	HasSibling    bool
}

// DelayPlan is Plan's answer.
type DelayPlan struct {
	// Delay is how long to sleep before continuing (0 to continue at once).
	Delay time.Duration
	// Source says where Delay came from.
	Source DelaySource
	// ExceedsMax (Flow step 9): Delay > Settings.MaxDelay, MaxDelay > 0 and no
	// switch happened. The chain ends with auto_retry_end{success:false}
	// without sleeping; the attempt reported is the current one.
	ExceedsMax bool
	// NoRetry: a classifier refusal without a model switch. The chain ends
	// silently: no auto_retry_start and no auto_retry_end, the attempt
	// counter resets and the gate resolves (Flow step 8).
	NoRetry bool
}

// Plan combines steps 6, 7 and 9 of the retry flow (docs/retry-policy.md §5
// and §2.3). It is pure
// arithmetic; the session does the switching, sleeping and event emission.
// It does not check retry.enabled or retry.max_retries (Flow steps 2 and 5,
// see Settings.Exhausted) and ignores Verdict.Retryable (a reasonless abort
// passes ReasonlessAbortVerdict()).
//
// In order:
//
//   - Stale replay: delay 0 (SourceStaleReplay). The session resets the
//     provider session and skips credential and model fallback.
//   - Switched: delay 0 (SourceSwitch), never ExceedsMax.
//   - Refusal without a switch: NoRetry (SourceNone); there is never a
//     same-model retry of a refusal.
//   - Otherwise start from the local backoff LocalDelay(Attempt,
//     Settings.BaseDelay, U) (SourceEstimate).
//   - Usage limit: the wait is the usage window — the hint when there is one
//     (a hint of 0 stays 0; SourceProvider), else Verdict.UsageWindow,
//     agentd's estimate (SourceEstimate; DefaultUsageWindow when the verdict
//     carries none) — and, when a sibling credential exists, at most
//     SiblingFreeIn + SiblingBuffer (SourceSibling), so a short sibling block
//     never escalates into the provider's full window. delay = max(backoff,
//     wait). Without a hint the wait is an estimate of at most
//     DefaultUsageWindow (30 min), reported as SourceEstimate: a usage limit
//     with no hint never becomes a multi-hour sleep, and with the default
//     max_delay_ms (5 min) and no sibling it ends the chain at once
//     (ExceedsMax) instead of sleeping on a guess.
//   - Any other class: delay = max(backoff, hint) (SourceProvider when the
//     hint is larger). A hint can raise the delay above MaxLocalDelay; it never
//     lowers it.
//   - ExceedsMax when Settings.MaxDelay > 0 and delay > MaxDelay. The cap
//     applies to the final delay, local backoff included.
func Plan(in DelayInput) DelayPlan {
	v := in.Verdict
	switch {
	case v.Class == ClassStaleReplay:
		return DelayPlan{Source: SourceStaleReplay}
	case in.Switched:
		return DelayPlan{Source: SourceSwitch}
	case v.Class == ClassRefusal:
		return DelayPlan{Source: SourceNone, NoRetry: true}
	}

	p := DelayPlan{
		Delay:  LocalDelay(in.Attempt, in.Settings.BaseDelay, in.U),
		Source: SourceEstimate,
	}
	hint := v.Hint
	if hint < 0 {
		hint = 0
	}
	if v.Class == ClassUsageLimit {
		wait, src := hint, SourceProvider
		if !v.HasHint {
			wait, src = v.UsageWindow, SourceEstimate
			if wait <= 0 || wait > DefaultUsageWindow {
				wait = DefaultUsageWindow
			}
		}
		if in.HasSibling {
			sib := in.SiblingFreeIn
			if sib < 0 {
				sib = 0
			}
			if sib > MaxHint {
				sib = MaxHint
			}
			if sib += SiblingBuffer; sib < wait {
				wait, src = sib, SourceSibling
			}
		}
		if wait > p.Delay {
			p.Delay, p.Source = wait, src
		}
	} else if v.HasHint && hint > p.Delay {
		p.Delay, p.Source = hint, SourceProvider
	}
	p.ExceedsMax = in.Settings.MaxDelay > 0 && p.Delay > in.Settings.MaxDelay
	return p
}
