// Package retry is agentd's retry policy for failed provider calls: pure
// decisions, no I/O and no clock of its own.
//
// It answers four questions for the session's retry engine, in the order of
// the retry flow (docs/retry-policy.md §5):
//
//  1. Is this failed assistant turn worth another attempt, and why?
//     [Classify] sorts a [Failure] into a [Class]: transient, usage limit,
//     context overflow (never retried: compaction owns it), stale replay
//     (OpenAI Responses state that is gone, or reasoning state a provider
//     refuses: [Verdict].Stale), classifier refusal, or not retryable.
//     [IsReasonlessAbort] recognises the generic-abort sentinel stop that is
//     retried without model fallback.
//  2. Did the provider say when to come back? [ParseHint] reads the retry
//     headers and the wording of the message.
//  3. How long to wait? [LocalDelay] is the capped, jittered exponential
//     backoff; [Plan] combines it with the hint, the usage-limit window,
//     sibling credentials and switches, and applies the fail-fast cap.
//  4. Are the settings sane? [Settings.Validate].
//
// Everything that depends on time takes "now" (or a jitter draw) as an
// argument, so the results are deterministic and the package is safe for
// concurrent use.
package retry
