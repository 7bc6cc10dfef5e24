package session

import (
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// ChainOutcome is how a retry chain ended (the label of
// agentd_retry_chains_ended_total).
type ChainOutcome string

// Chain outcomes, as the Observer hears them.
const (
	ChainSuccess    ChainOutcome = "success"
	ChainMaxRetries ChainOutcome = "max_retries"
	ChainMaxDelay   ChainOutcome = "max_delay"
	ChainCancelled  ChainOutcome = "cancelled" // the user's AbortRetry or Abort
	// ChainInterrupted: ended by something other than the user or the
	// retry policy — the server shutting down, the session deleted, its
	// lease lost, its owner replica lost.
	ChainInterrupted       ChainOutcome = "interrupted"
	ChainRefusalNoFallback ChainOutcome = "refusal_no_fallback"
	ChainDisabled          ChainOutcome = "disabled"
	ChainNotRetryable      ChainOutcome = "not_retryable"
	ChainBudgetExhausted   ChainOutcome = "budget_exhausted" // the retry budget refused the retry
)

// ChainOutcomes lists every chain outcome.
var ChainOutcomes = []ChainOutcome{ChainSuccess, ChainMaxRetries, ChainMaxDelay, ChainCancelled,
	ChainInterrupted, ChainRefusalNoFallback, ChainDisabled, ChainNotRetryable, ChainBudgetExhausted}

// What happens to a running prompt whose replica changes, as the Observer
// hears it: a replica took over a lost replica's prompt and resumed its
// retry, or ended it ("owner replica lost"); a replica shutting down handed
// a retry in backoff over; a replica cut off from the store stopped its
// prompt (its lease was lost).
const (
	TakeoverResumed   = "resumed"
	TakeoverEnded     = "ended"
	TakeoverHandedOff = "handed_over"
	TakeoverLeaseLost = "lease_lost"
)

// TakeoverOutcomes lists them.
var TakeoverOutcomes = []string{TakeoverResumed, TakeoverEnded, TakeoverHandedOff, TakeoverLeaseLost}

// Call describes one finished model call.
type Call struct {
	Provider, Model string
	Duration        time.Duration
	// TTFT is the time to the first streamed output; 0 when none came.
	TTFT       time.Duration
	StopReason string
	// Error stops only: the HTTP status (0 before a response, 200 for an
	// in-stream error) and the retry class.
	Status int
	Class  string
	// Usage is what the call reported it used; CostUSD its cost, nil when
	// the catalog has no price for the model.
	Usage   provider.Usage
	CostUSD *float64
}

// Retry describes one scheduled retry (an auto_retry_start).
type Retry struct {
	SessionID, Provider, Model, Credential string
	Attempt                                int
	Class, Source                          string
	Delay                                  time.Duration
}

// Observer hears what the session engine does, for metrics. Calls come from
// session goroutines, synchronously: implementations must be fast and safe
// for concurrent use. Embed NopObserver to implement only some methods.
type Observer interface {
	PromptEnded(outcome string, d time.Duration)
	ModelCalled(c Call)
	RetryScheduled(r Retry)
	// BackoffSlept reports a backoff sleep that ended (cut short when
	// cancelled); inBackoff is +1 when a sleep starts and -1 when it ends.
	BackoffSlept(class, source string, d time.Duration)
	InBackoff(delta int)
	ChainEnded(outcome ChainOutcome)
	CredentialSwitched(provider, reason string)
	FallbackApplied(role string)
	FallbackSucceeded(role string)
	FallbackReverted(role string)
	SubscriberDropped()
	// Takeover reports a change of the replica running a prompt (shared
	// store only): one of the Takeover outcomes.
	Takeover(outcome string)
	// RetryWasted reports the usage of a failed call that a retry or
	// fallback threw away (its model as provider/model); calls that used
	// nothing are not reported.
	RetryWasted(provider, model string, u provider.Usage)
}

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) PromptEnded(string, time.Duration)          {}
func (NopObserver) ModelCalled(Call)                           {}
func (NopObserver) RetryScheduled(Retry)                       {}
func (NopObserver) BackoffSlept(string, string, time.Duration) {}
func (NopObserver) InBackoff(int)                              {}
func (NopObserver) ChainEnded(ChainOutcome)                    {}
func (NopObserver) CredentialSwitched(string, string)          {}
func (NopObserver) FallbackApplied(string)                     {}
func (NopObserver) FallbackSucceeded(string)                   {}
func (NopObserver) FallbackReverted(string)                    {}
func (NopObserver) SubscriberDropped()                         {}
func (NopObserver) Takeover(string)                            {}
func (NopObserver) RetryWasted(string, string, provider.Usage) {}

var _ Observer = NopObserver{}
