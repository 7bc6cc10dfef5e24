package retry

// WindowBasis is what a usage-limit window rests on: the provider's own
// hint, or agentd's estimate (metrics label credential switches and blocks
// with it).
type WindowBasis string

// Window bases.
const (
	WindowHint     WindowBasis = "hint"
	WindowEstimate WindowBasis = "estimate"
)

// BasisOf is the basis of a window the provider gave (fromProvider) or
// agentd estimated.
func BasisOf(fromProvider bool) WindowBasis {
	if fromProvider {
		return WindowHint
	}
	return WindowEstimate
}

// WindowBasis is the basis of v's UsageWindow.
func (v Verdict) WindowBasis() WindowBasis { return BasisOf(!v.UsageWindowEstimated) }

// AllCredentialsBlocked is the verdict of a call that found every
// credential of its pool usage-limited before it was made: a usage limit
// (step 7 without a switch), whose wait is the earliest unblock.
func AllCredentialsBlocked() Verdict {
	return Verdict{Class: ClassUsageLimit, Retryable: true, Underlying: ClassUsageLimit,
		UsageWindow: DefaultUsageWindow, UsageWindowEstimated: true, Reason: "every credential is blocked"}
}
