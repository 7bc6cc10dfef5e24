package session

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
)

// Final errors of a retry chain that did not come from the provider.
const (
	finalCancelled = "Retry cancelled"      // the user's AbortRetry or Abort
	finalShutdown  = "server shutting down" // Manager.Close (a server draining)
	finalDeleted   = "session deleted"      // Manager.Delete
	finalLeaseLost = "session lease lost"   // a replica cut off from the store, or its lease taken
)

// finalBudget starts the final error of a chain whose retry retry.budget
// refused; the model, the retry class and the original error follow.
const finalBudget = "retry budget exhausted"

// RetryBudget is the retry budget (retry.budget) of every provider/model,
// shared by the replicas when the store is.
type RetryBudget interface {
	// Retry asks to retry a failed call of model (provider/model) on the
	// same target: true spends from its budget, false refuses.
	Retry(ctx context.Context, model string) bool
	// Succeeded credits model's budget with a successful call. It must not
	// wait on I/O: it runs on every successful call.
	Succeeded(model string)
}

// spendsBudget reports whether the retry the flow is about to schedule is
// a retry of the same target, which the retry budget must allow: not after
// a credential switch or a model fallback (another target), not when no
// call was made (every credential blocked: the wait is for a credential),
// and not for the one-off repairs of a request (a stale Responses replay,
// refused reasoning state) that are retried at once.
func spendsBudget(switched, reasoningFix, allBlocked bool, v retry.Verdict) bool {
	return !switched && !reasoningFix && !allBlocked && v.Class != retry.ClassStaleReplay
}

// chain is the state of a prompt's retry chain (docs/retry-policy.md §5):
// the attempt counter, the gate, the backoff sleep's cancel and what
// stopped the chain. One value, reset whole (chain{}) when the chain ends
// and when the prompt does.
type chain struct {
	attempt     int
	open        bool          // a retry chain is in progress (isRetrying)
	sleepCancel chan struct{} // closed by AbortRetry to cancel the backoff sleep
	aborted     bool          // AbortRetry arrived outside the sleep: end the chain at the next failure
	stop        stop          // what closed sleepCancel or set aborted (first one wins)
}

// A stop is what stopped a run, or its retry chain, from outside the model
// calls. Only the user's is a cancellation: the others are interruptions,
// and their final errors say what ended the chain.
type stop uint8

const (
	stopNone      stop = iota
	stopUser           // AbortRetry or Abort
	stopShutdown       // the server shutting down
	stopDeleted        // the session deleted
	stopLeaseLost      // the session's lease lost
	stopCaller         // the prompt's caller went away (cancel_on_disconnect)
)

// finalCallerGone is the final error of a prompt, and its retry chain,
// aborted because its caller went away (CallerGone).
const finalCallerGone = "caller disconnected"

// finalError is the final error of a retry chain the stop ended.
func (c stop) finalError() string {
	switch c {
	case stopShutdown:
		return finalShutdown
	case stopDeleted:
		return finalDeleted
	case stopLeaseLost:
		return finalLeaseLost
	case stopCaller:
		return finalCallerGone
	default:
		return finalCancelled
	}
}

// chainOutcome is the Observer's outcome of a retry chain the stop ended.
func (c stop) chainOutcome() ChainOutcome {
	switch c {
	case stopShutdown, stopDeleted, stopLeaseLost:
		return ChainInterrupted
	default:
		return ChainCancelled
	}
}

// chainEnd is the end of a retry chain the stop ended at attempt.
func (c stop) chainEnd(attempt int) chainEnd {
	return chainEnd{outcome: c.chainOutcome(), attempt: attempt, final: c.finalError()}
}

// abortError is the prompt_end error of a run the stop aborted outside a
// retry chain's backoff.
func (c stop) abortError() string {
	switch c {
	case stopNone:
		return ""
	case stopUser:
		return "aborted"
	default:
		return c.finalError()
	}
}

// Control causes of an OpAbort, as they travel between replicas.
const (
	causeAborted = "aborted"
	causeDeleted = "session deleted"
)

// stopOfCause reads a Control's abort cause; an unknown or empty one is the
// user's Abort.
func stopOfCause(cause string) stop {
	if cause == causeDeleted {
		return stopDeleted
	}
	return stopUser
}

// takeChainStopLocked returns what cancelled the retry chain (AbortRetry
// when nothing else did) and clears it.
func (s *Session) takeChainStopLocked() stop {
	c := s.chain.stop
	s.chain.stop = stopNone
	if c == stopNone {
		c = stopUser
	}
	return c
}

// handleRetryable is the retry flow, step by step (docs/retry-policy.md §5,
// 13 steps). It returns whether the prompt continues with
// another model call, and otherwise the prompt's final error.
// calls is the number of model calls the prompt made so far. A chain
// stopped from outside (AbortRetry, Abort, a delete, a shutdown, a lost
// lease) reports what stopped it (stopNone otherwise).
func (s *Session) handleRetryable(ctx context.Context, gen uint64, promptID string, t *turn, v retry.Verdict, allowFallback bool, calls int) (bool, string, stop) {
	msg := &t.Message
	errMsg := msg.ErrorMessage
	if errMsg == "" {
		errMsg = "Unknown error"
	}

	s.mu.Lock()
	// 1–2. Read the settings; retry disabled stops at once (no counter change).
	settings := s.settings
	if !settings.Enabled {
		s.mu.Unlock()
		s.endChainIfOpen(promptID, ChainDisabled, errMsg)
		return false, errMsg, stopNone
	}
	if s.chain.aborted {
		// AbortRetry (or an abort) arrived while this retried call was
		// streaming.
		s.chain.aborted = false
		by := s.takeChainStopLocked()
		s.mu.Unlock()
		s.endChainIfOpen(promptID, by.chainOutcome(), by.finalError())
		return false, by.finalError(), by
	}
	// 3. Count the attempt. 4. Open the gate once per chain.
	if s.chain.attempt == 0 {
		s.freeRetries, s.reasoningRetried = 0, false
	}
	s.chain.attempt++
	attempt := s.chain.attempt
	s.chain.open = true
	// Reasoning state the provider refused although its origin matched the
	// call (the account of a key changed, say): stripped, or thinking off
	// for the open tool loop, and retried once at once, outside
	// max_retries. A second refusal after that is an error like any other.
	reasoningFix := v.StaleReasoning() && !s.reasoningRetried
	if reasoningFix {
		s.reasoningRetried = true
		s.freeRetries++
	}
	free := s.freeRetries
	// 5. Past maxRetries: final failure, reporting the last attempted retry.
	if settings.Exhausted(attempt - free) {
		s.endChainLocked(promptID, chainEnd{outcome: ChainMaxRetries, attempt: attempt - 1, final: errMsg})
		s.mu.Unlock()
		return false, errMsg, stopNone
	}
	model := s.model
	cred := s.credential
	s.mu.Unlock()

	p := s.m.providerOf(model)
	// What the failed call was sent to.
	target := provider.Origin{Provider: p.Name, Model: strings.TrimPrefix(model, p.Name+"/"), Account: cred.AccountName()}
	switched := false
	var sw credstore.Switch

	// 6. A stale Responses replay retries at once, after the provider reset
	// its cached response state (the provider reports it in ResetState).
	// 7. A usage limit marks the credential and tries a sibling.
	if t.allBlocked {
		// No credential could be picked: wait for the earliest to free up.
		sw = credstore.Switch{HasSibling: true, SiblingFreeIn: t.allBlockedFor}
	} else if v.Class == retry.ClassUsageLimit && s.m.opts.Credentials != nil && cred.ID != "" {
		var err error
		sw, err = s.m.opts.Credentials.UsageLimited(ctx, s.tenant, p.Name, cred.ID, v.UsageWindow, !v.UsageWindowEstimated, errMsg)
		if err != nil {
			s.m.log.Warn("credential store: usage limit not recorded", "session", s.id, "provider", p.Name, "err", err)
		}
		if sw.Switched {
			switched = true
			s.m.opts.Observer.CredentialSwitched(p.Name, string(v.WindowBasis()))
			s.mu.Lock()
			s.credential = sw.To
			s.switchedTo = pickedCred{provider: p.Name, cred: sw.To}
			lost := s.credentialCacheLostLocked(sw.To)
			s.mu.Unlock()
			s.emit(Event{Type: EventCredentialSwitched, PromptID: promptID, Provider: p.Name, From: cred.ID, To: sw.To.ID, CacheLost: lost})
		}
	}
	// 8. No credential switch: the model fallback chain (never for a stale
	// replay or a reasonless abort).
	fellBack := false
	if !switched && settings.ModelFallback && allowFallback && v.Class != retry.ClassStaleReplay {
		fellBack = s.tryFallback(ctx, promptID, settings, v, t.scope())
		switched = fellBack
	}
	if v.Class == retry.ClassRefusal && !fellBack {
		// A classifier refusal continues only on a fallback model; without one
		// the chain ends silently (no auto_retry_start), counters reset.
		// The flow ends the chain silently; a chain that already announced
		// retries still gets its end, so clients can close it.
		s.mu.Lock()
		s.endChainLocked(promptID, chainEnd{outcome: ChainRefusalNoFallback, attempt: attempt - 1, final: errMsg, quiet: attempt == 1})
		s.mu.Unlock()
		return false, errMsg, stopNone
	}

	// 6, 7, 9. The delay, and the fail-fast cap.
	plan := retry.Plan(retry.DelayInput{
		Attempt: attempt, Settings: settings, Verdict: v, U: s.m.opts.Rand(),
		Switched: switched, SiblingFreeIn: sw.SiblingFreeIn, HasSibling: sw.HasSibling,
	})
	if plan.ExceedsMax {
		final := fmt.Sprintf("%s %dms wait, exceeds retry.maxDelayMs (%dms). Original error: %s",
			delayWording(plan.Source), plan.Delay.Milliseconds(), settings.MaxDelay.Milliseconds(), errMsg)
		s.mu.Lock()
		s.endChainLocked(promptID, chainEnd{outcome: ChainMaxDelay, attempt: attempt, final: final})
		s.mu.Unlock()
		return false, final, stopNone
	}
	// The retry budget: a retry of the same target spends from the model's
	// budget, and one it refuses ends the chain. A retry after the
	// tenant's own key's rate limit is that tenant's (turn.private).
	if b := s.m.opts.Budget; b != nil && !t.private() && spendsBudget(switched, reasoningFix, t.allBlocked, v) && !b.Retry(ctx, model) {
		final := fmt.Sprintf("%s for %s (%s). Original error: %s", finalBudget, model, v.Class, errMsg)
		s.mu.Lock()
		s.endChainLocked(promptID, chainEnd{outcome: ChainBudgetExhausted, attempt: attempt, final: final})
		s.mu.Unlock()
		return false, final, stopNone
	}

	s.mu.Lock()
	if gen != s.generation {
		// Superseded while deciding: end silently; run resolves the gate.
		s.mu.Unlock()
		return false, errMsg, stopNone
	}
	if s.chain.aborted {
		// AbortRetry arrived while steps 7–8 ran (the gate was open, no sleep
		// yet): the retry is cancelled before it starts.
		s.chain.aborted = false
		by := s.takeChainStopLocked()
		s.endChainLocked(promptID, by.chainEnd(attempt))
		s.mu.Unlock()
		return false, by.finalError(), by
	}
	// 11. Drop the failed assistant message from the runtime context (only if
	// it is still the last one); the persisted history keeps it.
	stripped := int64(-1)
	if n := len(s.context); n > 0 && s.context[n-1].Role == provider.RoleAssistant && s.context[n-1].StopReason == msg.StopReason {
		s.context = s.context[:n-1]
		if len(s.ctxIndex) == n {
			stripped = s.ctxIndex[n-1]
			s.ctxIndex = s.ctxIndex[:n-1]
		}
	}
	if reasoningFix {
		s.recoverReasoningLocked(v.Stale, target)
	}
	// Durable before it is announced: another replica resumes this retry
	// at its due time if this one is lost meanwhile.
	s.m.rep.schedule(s, Run{PromptID: promptID, Attempt: attempt, Due: s.m.opts.Now().Add(plan.Delay),
		Class: string(v.Class), DelaySource: string(plan.Source), Credential: s.credential.ID, Calls: calls}, stripped)
	// 10. auto_retry_start.
	s.emit(Event{Type: EventAutoRetryStart, PromptID: promptID, Attempt: attempt, MaxAttempts: settings.MaxRetries + free,
		Delay: plan.Delay, DelaySource: string(plan.Source), ErrorMessage: errMsg, ErrorClass: v.EventClass()})
	// 12. Sleep, cancellable by AbortRetry (and so by Abort).
	cancel := make(chan struct{})
	s.chain.sleepCancel = cancel
	obs := s.m.opts.Observer
	obs.RetryScheduled(Retry{SessionID: s.id, Provider: p.Name, Model: model, Credential: s.credential.ID,
		Attempt: attempt, Class: string(v.Class), Source: string(plan.Source), Delay: plan.Delay})
	// The failed call's model and credential; the next call's when a
	// switch changed them. Delays in milliseconds, the unit in the key.
	logArgs := []any{"session", s.id, "attempt", attempt, "max_attempts", settings.MaxRetries,
		"class", v.Class, "delay_ms", plan.Delay.Milliseconds(), "delay_source", plan.Source,
		"model", model, "credential", cred.ID, "error", errMsg}
	if s.model != model {
		logArgs = append(logArgs, "next_model", s.model)
	}
	if switched {
		logArgs = append(logArgs, "next_credential", s.credential.ID)
	}
	s.m.log.Info("retry scheduled", logArgs...)
	s.mu.Unlock()
	return s.backoff(ctx, gen, promptID, attempt, string(v.Class), string(plan.Source), plan.Delay, cancel, errMsg, calls)
}

// recoverReasoningLocked makes the runtime context acceptable to target,
// which refused its reasoning state (case): a refused signature or
// encrypted content strips the state target was sent (the persisted history
// keeps it; other origins' state stays for calls to them), a refused
// thinking order turns thinking off until the open tool loop ends.
func (s *Session) recoverReasoningLocked(c retry.StaleCase, target provider.Origin) {
	switch c {
	case retry.StaleReasoningOrder:
		s.thinkingOff = true
	default:
		s.context = provider.StripReasoningFor(s.context, target)
	}
	s.m.log.Info("stale reasoning state: retrying without it", "session", s.id, "case", c,
		"provider", target.Provider, "model", target.Model, "account", target.Account)
}

// backoff is step 12's sleep, which cancel (set as the session's
// sleepCancel by the caller, under the same lock as auto_retry_start)
// cancels, and step 13's check. It returns whether the prompt continues,
// and as handleRetryable does, the final error and what stopped the chain.
func (s *Session) backoff(ctx context.Context, gen uint64, promptID string, attempt int, class, source string, d time.Duration, cancel chan struct{}, errMsg string, calls int) (bool, string, stop) {
	obs := s.m.opts.Observer
	obs.InBackoff(1)
	slept := time.Now()
	cancelled := sleep(ctx, d, cancel)
	obs.InBackoff(-1)
	obs.BackoffSlept(class, source, time.Since(slept))

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chain.sleepCancel == cancel {
		s.chain.sleepCancel = nil
	}
	if cancelled {
		by := s.takeChainStopLocked()
		s.endChainLocked(promptID, by.chainEnd(attempt))
		return false, by.finalError(), by
	}
	// 13. The continuation runs for the same prompt generation only; a stale
	// one is a no-op (run resolves the gate).
	if gen != s.generation || ctx.Err() != nil {
		return false, errMsg, stopNone
	}
	// Out of backoff: a replica taking over from now on ends the prompt.
	s.m.rep.schedule(s, Run{PromptID: promptID, Attempt: attempt, Credential: s.credential.ID, Calls: calls}, -1)
	return true, "", stopNone
}

// sleep waits d, or until cancel is closed (true) or ctx is done (false,
// when cancel is not closed). A cancel that races the timer wins.
func sleep(ctx context.Context, d time.Duration, cancel <-chan struct{}) (cancelled bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cancel:
	case <-ctx.Done():
	}
	select {
	case <-cancel:
		return true
	default:
		return false
	}
}

func delayWording(src retry.DelaySource) string {
	if src == retry.DelaySource("provider") {
		return "Provider requested"
	}
	return "Estimated"
}
