package retry

import (
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	t.Parallel()
	def := DefaultSettings()
	noCap := DefaultSettings()
	noCap.MaxDelay = 0
	negCap := DefaultSettings()
	negCap.MaxDelay = -1
	lowCap := DefaultSettings()
	lowCap.MaxDelay = 5 * time.Second

	transient := Verdict{Class: ClassTransient, Retryable: true}
	withHint := func(v Verdict, d time.Duration) Verdict { v.Hint, v.HasHint = d, true; return v }
	usage := Verdict{Class: ClassUsageLimit, Retryable: true, UsageWindow: DefaultUsageWindow, UsageWindowEstimated: true}
	usageHint := func(d time.Duration) Verdict {
		return Verdict{Class: ClassUsageLimit, Retryable: true, Hint: d, HasHint: true, UsageWindow: d}
	}

	cases := []struct {
		name string
		in   DelayInput
		want DelayPlan
	}{
		// local backoff
		{"transient attempt 1 u=0", DelayInput{Attempt: 1, Settings: def, Verdict: transient}, DelayPlan{Delay: 375 * time.Millisecond, Source: SourceEstimate}},
		{"transient attempt 1 u=1", DelayInput{Attempt: 1, Settings: def, Verdict: transient, U: 1}, DelayPlan{Delay: 500 * time.Millisecond, Source: SourceEstimate}},
		{"transient attempt 10 capped", DelayInput{Attempt: 10, Settings: def, Verdict: transient, U: 1}, DelayPlan{Delay: 8 * time.Second, Source: SourceEstimate}},
		{"reasonless abort verdict", DelayInput{Attempt: 2, Settings: def, Verdict: ReasonlessAbortVerdict(), U: 1}, DelayPlan{Delay: time.Second, Source: SourceEstimate}},
		{"zero verdict is plain backoff", DelayInput{Attempt: 3, Settings: def, U: 1}, DelayPlan{Delay: 2 * time.Second, Source: SourceEstimate}},
		// hints
		{"hint below backoff ignored", DelayInput{Attempt: 4, Settings: def, Verdict: withHint(transient, time.Second), U: 1}, DelayPlan{Delay: 4 * time.Second, Source: SourceEstimate}},
		{"hint above backoff wins", DelayInput{Attempt: 1, Settings: def, Verdict: withHint(transient, 20*time.Second)}, DelayPlan{Delay: 20 * time.Second, Source: SourceProvider}},
		{"hint raises above 8s cap", DelayInput{Attempt: 10, Settings: def, Verdict: withHint(transient, 60*time.Second)}, DelayPlan{Delay: time.Minute, Source: SourceProvider}},
		{"hint 0 keeps backoff", DelayInput{Attempt: 1, Settings: def, Verdict: withHint(transient, 0), U: 1}, DelayPlan{Delay: 500 * time.Millisecond, Source: SourceEstimate}},
		{"negative hint treated as 0", DelayInput{Attempt: 1, Settings: def, Verdict: withHint(transient, -time.Hour), U: 1}, DelayPlan{Delay: 500 * time.Millisecond, Source: SourceEstimate}},
		// fail-fast cap
		{"hint past max delay", DelayInput{Attempt: 1, Settings: def, Verdict: withHint(transient, 11180*time.Second)}, DelayPlan{Delay: 11180 * time.Second, Source: SourceProvider, ExceedsMax: true}},
		{"hint equal to max delay is fine", DelayInput{Attempt: 1, Settings: def, Verdict: withHint(transient, 5*time.Minute)}, DelayPlan{Delay: 5 * time.Minute, Source: SourceProvider}},
		{"cap disabled by 0", DelayInput{Attempt: 1, Settings: noCap, Verdict: withHint(transient, 3*time.Hour)}, DelayPlan{Delay: 3 * time.Hour, Source: SourceProvider}},
		{"cap disabled by negative", DelayInput{Attempt: 1, Settings: negCap, Verdict: withHint(transient, 3*time.Hour)}, DelayPlan{Delay: 3 * time.Hour, Source: SourceProvider}},
		{"low cap trips on local backoff", DelayInput{Attempt: 5, Settings: lowCap, Verdict: transient, U: 1}, DelayPlan{Delay: 8 * time.Second, Source: SourceEstimate, ExceedsMax: true}},
		// switches
		{"credential switch forces 0", DelayInput{Attempt: 3, Settings: def, Verdict: usageHint(3 * time.Hour), Switched: true}, DelayPlan{Delay: 0, Source: SourceSwitch}},
		{"model switch forces 0 past cap", DelayInput{Attempt: 3, Settings: def, Verdict: withHint(transient, 3*time.Hour), Switched: true}, DelayPlan{Delay: 0, Source: SourceSwitch}},
		{"refusal with fallback", DelayInput{Attempt: 1, Settings: def, Verdict: Verdict{Class: ClassRefusal, Retryable: true}, Switched: true}, DelayPlan{Delay: 0, Source: SourceSwitch}},
		{"refusal without fallback ends silently", DelayInput{Attempt: 1, Settings: def, Verdict: Verdict{Class: ClassRefusal, Retryable: true}}, DelayPlan{Source: SourceNone, NoRetry: true}},
		// stale replay
		{"stale replay delay 0", DelayInput{Attempt: 4, Settings: def, Verdict: Verdict{Class: ClassStaleReplay, Retryable: true}, U: 1}, DelayPlan{Delay: 0, Source: SourceStaleReplay}},
		{"stale replay ignores hint", DelayInput{Attempt: 4, Settings: def, Verdict: Verdict{Class: ClassStaleReplay, Retryable: true, Hint: time.Hour, HasHint: true}}, DelayPlan{Delay: 0, Source: SourceStaleReplay}},
		// usage limits
		{"usage short hint", DelayInput{Attempt: 1, Settings: def, Verdict: usageHint(20 * time.Second)}, DelayPlan{Delay: 20 * time.Second, Source: SourceProvider}},
		{"usage hint below backoff", DelayInput{Attempt: 5, Settings: def, Verdict: usageHint(time.Second), U: 1}, DelayPlan{Delay: 8 * time.Second, Source: SourceEstimate}},
		{"usage hint 0 kept", DelayInput{Attempt: 1, Settings: def, Verdict: usageHint(0), U: 1}, DelayPlan{Delay: 500 * time.Millisecond, Source: SourceEstimate}},
		{"usage long hint no sibling fails fast", DelayInput{Attempt: 1, Settings: def, Verdict: usageHint(11180 * time.Second)}, DelayPlan{Delay: 11180 * time.Second, Source: SourceProvider, ExceedsMax: true}},
		{"usage long hint sibling frees soon (c.4)", DelayInput{Attempt: 1, Settings: def, Verdict: usageHint(11180 * time.Second), HasSibling: true, SiblingFreeIn: 2 * time.Second}, DelayPlan{Delay: 3 * time.Second, Source: SourceSibling}},
		{"usage sibling later than hint", DelayInput{Attempt: 1, Settings: def, Verdict: usageHint(10 * time.Second), HasSibling: true, SiblingFreeIn: time.Minute}, DelayPlan{Delay: 10 * time.Second, Source: SourceProvider}},
		{"usage sibling already free", DelayInput{Attempt: 1, Settings: def, Verdict: usageHint(time.Hour), HasSibling: true, SiblingFreeIn: -5 * time.Second, U: 1}, DelayPlan{Delay: time.Second, Source: SourceSibling}},
		{"usage sibling below backoff", DelayInput{Attempt: 5, Settings: def, Verdict: usageHint(time.Hour), HasSibling: true, U: 1}, DelayPlan{Delay: 8 * time.Second, Source: SourceEstimate}},
		{"usage sibling huge saturates", DelayInput{Attempt: 1, Settings: noCap, Verdict: usageHint(time.Hour), HasSibling: true, SiblingFreeIn: 1<<63 - 1}, DelayPlan{Delay: time.Hour, Source: SourceProvider}},
		{"usage no hint estimate fails fast", DelayInput{Attempt: 1, Settings: def, Verdict: usage}, DelayPlan{Delay: DefaultUsageWindow, Source: SourceEstimate, ExceedsMax: true}},
		{"usage no hint cap disabled sleeps at most 30m", DelayInput{Attempt: 1, Settings: noCap, Verdict: usage}, DelayPlan{Delay: DefaultUsageWindow, Source: SourceEstimate}},
		{"usage no hint bogus window clamped", DelayInput{Attempt: 1, Settings: noCap, Verdict: Verdict{Class: ClassUsageLimit, UsageWindow: 10 * time.Hour}}, DelayPlan{Delay: DefaultUsageWindow, Source: SourceEstimate}},
		{"usage no hint no window uses default", DelayInput{Attempt: 1, Settings: noCap, Verdict: Verdict{Class: ClassUsageLimit}}, DelayPlan{Delay: DefaultUsageWindow, Source: SourceEstimate}},
		{"usage no hint rate estimate", DelayInput{Attempt: 1, Settings: def, Verdict: Verdict{Class: ClassUsageLimit, UsageWindow: 30 * time.Second, UsageWindowEstimated: true}}, DelayPlan{Delay: 30 * time.Second, Source: SourceEstimate}},
		{"usage no hint sibling", DelayInput{Attempt: 1, Settings: def, Verdict: usage, HasSibling: true, SiblingFreeIn: 10 * time.Second}, DelayPlan{Delay: 11 * time.Second, Source: SourceSibling}},
		{"usage sibling past cap", DelayInput{Attempt: 1, Settings: def, Verdict: usage, HasSibling: true, SiblingFreeIn: 10 * time.Minute}, DelayPlan{Delay: 10*time.Minute + time.Second, Source: SourceSibling, ExceedsMax: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Plan(tc.in); got != tc.want {
				t.Errorf("Plan(%+v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

// TestPlanClassified runs Classify and Plan together on the reference's
// scenarios.
func TestPlanClassified(t *testing.T) {
	t.Parallel()
	s := DefaultSettings()
	// reference test "waits for the earliest sibling unblock instead of failing the delay cap"
	v := Classify(failure("429 usage limit reached retry-after-ms=11180000"), testNow)
	p := Plan(DelayInput{Attempt: 1, Settings: s, Verdict: v, U: 0.5, HasSibling: true, SiblingFreeIn: 2 * time.Second})
	if p.Delay < time.Second || p.Delay > 3*time.Second || p.ExceedsMax {
		t.Errorf("sibling scenario: %+v, want 1–3s without cap", p)
	}
	// "defaults 502 auto-retry to ten capped backoff attempts"
	v = Classify(failure("502 Bad Gateway"), testNow)
	for a, want := range []time.Duration{500, 1000, 2000, 4000, 8000, 8000, 8000, 8000, 8000, 8000} {
		p := Plan(DelayInput{Attempt: a + 1, Settings: s, Verdict: v, U: 1})
		if p.Delay != want*time.Millisecond || p.ExceedsMax {
			t.Errorf("attempt %d: %+v, want %v", a+1, p, want*time.Millisecond)
		}
	}
	if !s.Exhausted(11) || s.Exhausted(10) {
		t.Errorf("Exhausted(10/11) wrong for MaxRetries 10")
	}
	// Anthropic 3 h window (issue #607): fail fast, reported as the provider's
	v = Classify(failure("rate_limit_error", status(429), hdr("retry-after-ms", "11180000")), testNow)
	p = Plan(DelayInput{Attempt: 1, Settings: s, Verdict: v})
	if !p.ExceedsMax || p.Source != SourceProvider {
		t.Errorf("3h window: %+v, want ExceedsMax from provider", p)
	}
	// an opaque 429 without hint: agentd's estimate, never "provider"
	v = Classify(failure("429"), testNow)
	p = Plan(DelayInput{Attempt: 1, Settings: s, Verdict: v})
	if v.Class != ClassUsageLimit || p.Source != SourceEstimate || !p.ExceedsMax {
		t.Errorf("opaque 429: %s %+v, want usage limit, estimate, ExceedsMax", v.Class, p)
	}
}
