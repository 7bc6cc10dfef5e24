package retry

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/retry/internal/match"
)

// Class is what kind of failure a failed assistant turn is, as far as retrying
// goes. Its string form is the name used on the wire (events, `agentd
// classify`, metrics labels).
type Class string

// The classes of [Classify]. A verdict is retryable exactly when its class is
// transient, usage_limit, stale_replay or refusal.
const (
	// ClassTransient is overload, throttling, a server error or a transport
	// failure: back off and try again.
	ClassTransient Class = "transient"
	// ClassUsageLimit is a quota, billing or account-level limit: block the
	// credential until its window ends and rotate to a sibling; back off only
	// when no sibling is free.
	ClassUsageLimit Class = "usage_limit"
	// ClassContextOverflow is a prompt that does not fit the model's context.
	// It is never retried; compaction handles it.
	ClassContextOverflow Class = "context_overflow"
	// ClassStaleReplay is a replay of provider state that the provider no
	// longer accepts: an OpenAI Responses replay whose stored state is gone
	// (item or previous_response not found, expired, invalid, zero data
	// retention), or reasoning state it refuses (Verdict.Stale tells which:
	// an Anthropic thinking signature of another model or account, OpenAI
	// encrypted content of another organisation). Reset the cached provider
	// session, or strip the reasoning state, and retry at once, without
	// credential or model fallback.
	ClassStaleReplay Class = "stale_replay"
	// ClassRefusal is a classifier refusal (stopDetails "refusal" or
	// "sensitive"). It is retried only on a fallback model, never on the same
	// one.
	ClassRefusal Class = "refusal"
	// ClassNotRetryable is everything else, including retryable classes that
	// the observable-output rule excluded (see Verdict.Underlying).
	ClassNotRetryable Class = "not_retryable"
)

// StaleCase says what state a stale replay (ClassStaleReplay) replayed.
type StaleCase string

// The cases of a stale replay.
const (
	// StaleNone: not a stale replay.
	StaleNone StaleCase = ""
	// StaleResponsesState: an OpenAI Responses previous_response_id or item
	// the server no longer has. Reset the provider's cached session (the
	// provider sets Result.ResetState) and resend the whole context.
	StaleResponsesState StaleCase = "responses_state"
	// StaleReasoningSignature: Anthropic refused thinking blocks replayed
	// to it: their signature ("Invalid `signature` in `thinking` block":
	// missing, altered, or made for another model or account), blocks of the
	// latest assistant message that changed, thinking that is not first in
	// its message, thinking in a final assistant message while thinking is
	// off. Strip the reasoning state the target did not make (all of it when
	// provenance is unknown) and retry.
	StaleReasoningSignature StaleCase = "reasoning_signature"
	// StaleReasoningOrder: with thinking on, Anthropic wants the final
	// assistant message of an open tool loop to start with a thinking block
	// ("must start with a thinking block"), typically after a switch in the
	// middle of a tool loop. Retry with thinking off until the loop ends.
	StaleReasoningOrder StaleCase = "reasoning_order"
	// StaleReasoningEncrypted: OpenAI could not verify a reasoning item's
	// encrypted content (code invalid_encrypted_content: altered, or made
	// for another organisation). Strip the reasoning state and retry.
	StaleReasoningEncrypted StaleCase = "reasoning_encrypted_content"
)

// Reasoning reports whether the case is stale reasoning state.
func (s StaleCase) Reasoning() bool {
	switch s {
	case StaleReasoningSignature, StaleReasoningOrder, StaleReasoningEncrypted:
		return true
	}
	return false
}

// ErrorClassStaleReasoning is the error class events report for a stale
// replay of reasoning state (Verdict.EventClass); `agentd classify` and
// metrics keep the class, stale_replay.
const ErrorClassStaleReasoning = "stale_reasoning"

// String returns the wire name of the class.
func (c Class) String() string { return string(c) }

// Retryable reports whether a verdict of this class starts a retry (for a
// refusal, only through model fallback).
func (c Class) Retryable() bool {
	switch c {
	case ClassTransient, ClassUsageLimit, ClassStaleReplay, ClassRefusal:
		return true
	}
	return false
}

// StopDetailStreamInterrupted is the stop detail a stream gets when it failed
// after emitting content; such a turn is never replayed (except refusals).
// It is matched in any case (the reference spells it in lower case); this
// spelling is the one agentd's providers report and its API shows.
const StopDetailStreamInterrupted = "STREAM_INTERRUPTED_AFTER_CONTENT"

// GenericAbortSentinel is the error message of a content-less aborted stop that
// was not caused by the user (docs/retry-policy.md §1.6).
const GenericAbortSentinel = "Request was aborted"

// IsReasonlessAbort reports whether a stop is the reasonless abort that the
// session retries without model fallback: stopReason "aborted", no content,
// and the generic sentinel as its message (with or without a final period,
// as the reference's HEAD accepts). The caller must also check that no user,
// dispose or streaming-edit-guard abort is in progress; this package cannot
// know. The same text with stopReason "error" is not retried ([Classify]
// returns not_retryable for it).
func IsReasonlessAbort(stopReason, errorMessage string, hasContent bool) bool {
	if stopReason != "aborted" || hasContent {
		return false
	}
	return errorMessage == GenericAbortSentinel || errorMessage == GenericAbortSentinel+"."
}

// ReasonlessAbortVerdict is the verdict to hand to [Plan] for a stop that
// [IsReasonlessAbort] accepted: an ordinary transient backoff without a hint.
func ReasonlessAbortVerdict() Verdict {
	return Verdict{
		Class:      ClassTransient,
		Retryable:  true,
		Underlying: ClassTransient,
		Reason:     "reasonless abort (generic abort sentinel); retry without model fallback",
	}
}

// Failure is what is known about a failed assistant turn.
type Failure struct {
	StopReason       string      // "error", "aborted", "stop", ... (message_end stopReason)
	ErrorMessage     string      // the error text, as the provider client wrote it
	StopDetails      string      // "refusal", "sensitive", "stream_interrupted_after_content" (any case) or ""
	API              string      // provider kind: "anthropic", "openai-responses", "openai-chat", "gemini", "simulated", or ""
	Status           int         // HTTP status when known, else 0 (200 for an in-stream error event)
	Headers          http.Header // response headers when known; keys are matched case-insensitively
	ErrorType        string      // provider error.type, e.g. "overloaded_error"
	ErrorCode        string      // provider error.code, e.g. "insufficient_quota"
	ObservableOutput bool        // stream already emitted a tool call, non-empty text, thinking or redacted thinking
	// Body is the provider's error body (or error event) when known: its
	// structured hints are read (google.rpc.RetryInfo and QuotaFailure of
	// a Gemini error, after the headers and the wording). A body over 64
	// KiB says nothing.
	Body string

	// ContextWindow and InputTokens, when both are known (> 0), detect the
	// silent overflow of docs/retry-policy.md §1.2: input + cache read +
	// cache write tokens (InputTokens) above the model's context window.
	// Leave them 0 when unknown.
	ContextWindow int
	InputTokens   int
}

// Verdict is the classifier's answer.
type Verdict struct {
	// Class is the failure's class. When the observable-output rule excluded a
	// retryable class, Class is ClassNotRetryable and Underlying keeps the
	// original.
	Class Class
	// Retryable is Class.Retryable(): whether the session starts (or goes on
	// with) a retry chain. For ClassRefusal only through model fallback.
	Retryable bool
	// Hint is the provider's retry hint (headers first, then message wording;
	// see [ParseHint]), valid when HasHint. It is parsed for every class.
	Hint    time.Duration
	HasHint bool
	// Underlying is the class before the observable-output exclusion; equal to
	// Class in every other case.
	Underlying Class
	// UsageWindow, for a usage limit (Underlying), is how long the credential
	// is to be considered blocked: Hint when HasHint (a hint of 0 stays 0),
	// else agentd's estimate from the wording (UsageWindowEstimated): 30 min
	// for quota/unknown, 30 s for rate limits, 60 s for model capacity, 20 s
	// for server errors (docs/retry-policy.md §1.8). Zero for other classes.
	UsageWindow          time.Duration
	UsageWindowEstimated bool
	// Cooldown, for transient and usage-limit failures (Underlying), is how
	// long the failing model selector should be suppressed before model
	// fallback (docs/retry-policy.md §4): Hint when it is > 0, else 5 min for an
	// unknown reason, 30 min quota, 30 s rate limit, 60 s capacity, 20 s
	// server error. Zero for other classes (refusals and stale replays record
	// no cooldown).
	Cooldown time.Duration
	// KeyScoped, for transient and usage-limit failures (Underlying), says
	// the failure is the credential's account's own rather than the
	// model's: a rate limit or a quota by its wording, or a usage limit or
	// a 429 that names no other reason. A model's capacity and a server's
	// failure are not, whatever their status.
	KeyScoped bool
	// Reason says in a few words why, for logs and `agentd classify`.
	Reason string
	// Stale, for a stale replay (Underlying ClassStaleReplay), says what
	// was replayed: Responses state or reasoning state, and which.
	Stale StaleCase
	// OverLimit: the request alone is larger than the provider's rate limit
	// (a "Request too large for … on tokens per min" 429), so it can never
	// succeed at that limit (docs/retry-policy.md §1.9). Class is
	// ClassNotRetryable — not a throttle, not a usage limit of the
	// credential, not a context overflow — and Reason says why.
	OverLimit bool
}

// StaleReasoning reports whether the verdict is a stale replay of
// reasoning state: the session strips it (or turns thinking off, for
// StaleReasoningOrder) before the retry.
func (v Verdict) StaleReasoning() bool {
	return v.Class == ClassStaleReplay && v.Stale.Reasoning()
}

// EventClass is the error class for events: ErrorClassStaleReasoning for
// stale reasoning state, else the class's name.
func (v Verdict) EventClass() string {
	if v.StaleReasoning() {
		return ErrorClassStaleReasoning
	}
	return string(v.Class)
}

// LongRateLimitHint is the hint length from which a rate-limited (429)
// failure is treated as a usage limit: no per-minute throttle asks for ten
// minutes, while drained subscription windows answer a 429 with Retry-After
// of hours. Rotating to a sibling beats waiting (or failing on the cap).
const LongRateLimitHint = 10 * time.Minute

// DefaultUsageWindow is the usage-limit window assumed when neither a hint nor
// the wording says anything more specific (reference: 30 min for quota and
// unknown reasons). It is also the longest window agentd ever estimates
// itself, except for a Bedrock per-day quota (until 00:00 UTC, see
// bedrock.go).
const DefaultUsageWindow = 30 * time.Minute

// Classify decides what kind of failure f is, in the order of
// docs/retry-policy.md §1.1:
//
//  1. stopReason must be "error" (an aborted stop is never classified as
//     retryable here; see [IsReasonlessAbort]). Silent overflow (InputTokens
//     above ContextWindow) is reported for any stop reason.
//  2. A request larger than the provider's rate limit (OpenAI, Groq and
//     Anthropic wordings, see overlimit.go) is not retryable (Verdict.OverLimit);
//     then context overflow is excluded from retry: structured codes
//     (context_length_exceeded, request_too_large, status 413, …) or the
//     overflow wordings of every major provider. It is checked before the
//     empty-message rule so that compaction still gets a code-only overflow.
//  3. The error message must be non-empty (after trimming spaces).
//  4. Classifier refusal (StopDetails "refusal"/"sensitive"): retryable,
//     checked before and exempt from the observable-output rule.
//  5. Stale replay: reasoning state the provider refuses (an Anthropic
//     thinking signature, the thinking-first rule of a tool loop, OpenAI
//     invalid_encrypted_content; any API but openai-chat, which replays no
//     reasoning), then a stale OpenAI Responses replay (only for a
//     Responses API, or with code previous_response_not_found).
//     Verdict.Stale says which.
//  6. Usage limit (quota, billing, account-level and daily limits, opaque 429
//     bodies, 429 with a hint of LongRateLimitHint or more), then transient
//     (overload, throttling, 408/429/5xx, server and transport failures). Text
//     and structure both count: a wording the patterns miss is still caught
//     by Status, ErrorType or ErrorCode, and vice versa.
//  7. Observable output (ObservableOutput, or StopDetails
//     stream_interrupted_after_content) turns steps 5–6 into not_retryable: a
//     partly produced turn is not silently replayed.
//
// now is used for HTTP-date and epoch hints only. A message longer than 64
// KiB is examined at its first 48 KiB and last 16 KiB. Classify never panics
// and is safe for concurrent use.
func Classify(f Failure, now time.Time) Verdict {
	msg := prepareMessage(f.ErrorMessage, true)
	hdrs := viewHeaders(f.Headers)
	hint, hasHint := parseHint(hdrs, msg, now)
	g := parseGoogleBody(f.Body)
	if !hasHint && g.hasDelay {
		hint, hasHint = g.delay, true // RetryInfo, after the headers and the wording
	}
	v := Verdict{Hint: hint, HasHint: hasHint}
	done := func(class Class, reason string) Verdict {
		v.Class, v.Underlying, v.Retryable, v.Reason = class, class, class.Retryable(), reason
		return v
	}

	if f.ContextWindow > 0 && f.InputTokens > f.ContextWindow {
		return done(ClassContextOverflow, "silent overflow: "+strconv.Itoa(f.InputTokens)+" input tokens > context window "+strconv.Itoa(f.ContextWindow))
	}
	if f.StopReason != "error" {
		if f.StopReason == "aborted" {
			return done(ClassNotRetryable, `stop reason "aborted": deliberate aborts are not retried (reasonless aborts: IsReasonlessAbort)`)
		}
		return done(ClassNotRetryable, "stop reason "+quote(f.StopReason)+` is not "error"`)
	}
	c := newFacts(f, msg, hdrs)
	if reason, ok := c.overLimit(); ok {
		v = done(ClassNotRetryable, reason)
		v.OverLimit = true
		return v
	}
	if reason, ok := c.bedrockOverflow(); ok {
		return done(ClassContextOverflow, reason+" (context overflow is handled by compaction, never retried)")
	}
	if reason, ok := c.overflow(); ok {
		return done(ClassContextOverflow, reason+" (context overflow is handled by compaction, never retried)")
	}
	if strings.TrimSpace(f.ErrorMessage) == "" {
		return done(ClassNotRetryable, "empty error message")
	}
	if isRefusal(f.StopDetails) {
		return done(ClassRefusal, "classifier refusal (stopDetails "+quote(strings.ToLower(strings.TrimSpace(f.StopDetails)))+"): retried only on a fallback model")
	}

	if r, ok := c.creditsExhausted(); ok {
		return done(ClassNotRetryable, r)
	}

	var class Class
	var reason string
	var staleCase StaleCase
	var bedrockDaily bool
	if r, sc, ok := c.stale(); ok {
		class, reason, staleCase = ClassStaleReplay, r, sc
	} else if r, cl, daily, ok := c.bedrock(); ok {
		if !cl.Retryable() {
			return done(cl, r)
		}
		class, reason, bedrockDaily = cl, r, daily
	} else if cl, r, ok := c.google(g); ok {
		class, reason = cl, r
		if cl == ClassUsageLimit {
			// A daily quota resets at midnight Pacific: a shorter wait
			// (Google's RetryInfo on a daily quota, a wording) is not
			// the reset.
			if reset := untilPacificMidnight(now); !hasHint || hint < reset {
				hint, hasHint = reset, true
				v.Hint, v.HasHint = hint, hasHint
			}
		}
	} else if r, ok := c.localServer(); ok {
		class, reason = ClassTransient, r
	} else if r, ok := c.usage(hint, hasHint); ok {
		class, reason = ClassUsageLimit, r
	} else if r, ok := c.transient(); ok {
		class, reason = ClassTransient, r
	} else {
		return done(ClassNotRetryable, "no retryable signal in status, error type/code or text")
	}

	v = done(class, reason)
	v.Stale = staleCase
	if class == ClassUsageLimit || class == ClassTransient {
		lr := c.limitReason()
		if class == ClassUsageLimit {
			if hasHint {
				v.UsageWindow = hint
			} else {
				v.UsageWindow, v.UsageWindowEstimated = lr.usageEstimate(), true
			}
		}
		if hasHint && hint > 0 {
			v.Cooldown = hint
		} else {
			v.Cooldown = lr.cooldown()
		}
		if bedrockDaily && !hasHint {
			v.UsageWindow = bedrockDailyWindow(now)
			v.Cooldown = v.UsageWindow
		}
		switch lr {
		case reasonRate, reasonQuota:
			v.KeyScoped = true
		case reasonUnknown:
			v.KeyScoped = class == ClassUsageLimit ||
				c.status == http.StatusTooManyRequests || c.textStatus == http.StatusTooManyRequests
		}
	}
	if f.ObservableOutput || strings.EqualFold(strings.TrimSpace(f.StopDetails), StopDetailStreamInterrupted) {
		v.Class, v.Retryable = ClassNotRetryable, false
		v.Reason = reason + "; not retried: the stream already emitted observable output"
	}
	return v
}

func isRefusal(stopDetails string) bool {
	s := strings.TrimSpace(stopDetails)
	return strings.EqualFold(s, "refusal") || strings.EqualFold(s, "sensitive")
}

// facts is a Failure prepared for the pattern families.
type facts struct {
	f     Failure
	hdrs  headerView
	words match.Subject // words(message), scanned by the literal index
	lower string        // strings.ToLower(message)
	code  string        // codeKey(ErrorCode)
	typ   string        // codeKey(ErrorType)
	// status is Failure.Status, or a three-digit ErrorCode (Azure writes
	// "429") when Status is unknown.
	status int
	// textStatus is the status written in the message when Status is unknown
	// or 2xx (an in-stream error after a 200), else Status.
	textStatus int

	// Computed on first use: limitReasonOf and accountRateLimited of the
	// message (both may be asked for twice), and the message's standalone
	// three-digit numbers (numbers[:numbersLen], in order; when there are more
	// than fit, numbersLen is -1 and each question scans the text).
	reason       limitReason
	reasonKnown  bool
	account      bool
	accountKnown bool
	numbers      [8]int
	numbersLen   int
	numbersKnown bool
}

func newFacts(f Failure, msg message, hdrs headerView) facts {
	c := facts{
		f:      f,
		hdrs:   hdrs,
		words:  msg.words,
		lower:  msg.lower.S,
		code:   codeKey(f.ErrorCode),
		typ:    codeKey(f.ErrorType),
		status: f.Status,
	}
	if c.status == 0 {
		if n, err := strconv.Atoi(strings.TrimSpace(f.ErrorCode)); err == nil && n >= 100 && n <= 599 {
			c.status = n
		}
	}
	c.textStatus = c.status
	if c.status < 300 {
		c.textStatus = statusFromLower(msg.clipped, &msg.lower)
	}
	return c
}

// codeKey normalises an error type or code: "RateLimitReached" and
// "rate_limit_reached" and "RATE_LIMIT_REACHED" all become
// "rate_limit_reached".
func codeKey(s string) string {
	s = strings.TrimSpace(s)
	if isPlainCode(s) {
		return s // what the general case gives, without its allocations
	}
	return strings.ReplaceAll(strings.TrimSpace(words(s)), " ", "_")
}

// isPlainCode reports whether s is ASCII without upper-case letters and
// spaces: codeKey leaves such a code (after trimming) as it is.
func isPlainCode(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || isUpper(c) || c == ' ' {
			return false
		}
	}
	return true
}

func (c *facts) hasCode(set map[string]bool) (string, bool) {
	if c.code != "" && set[c.code] {
		return "error code " + quote(c.code), true
	}
	if c.typ != "" && set[c.typ] {
		return "error type " + quote(c.typ), true
	}
	return "", false
}

// standaloneNumber is firstStandaloneNumber(the lower-case message, codes...),
// with one pass over the text for all questions.
func (c *facts) standaloneNumber(codes ...int) (int, bool) {
	if !c.numbersKnown {
		c.numbersKnown = true
		standaloneNumbers(c.lower, func(n int) bool {
			if c.numbersLen == len(c.numbers) {
				c.numbersLen = -1
				return true
			}
			c.numbers[c.numbersLen] = n
			c.numbersLen++
			return false
		})
	}
	if c.numbersLen < 0 {
		return firstStandaloneNumber(c.lower, codes...)
	}
	for _, n := range c.numbers[:c.numbersLen] {
		if slices.Contains(codes, n) {
			return n, true
		}
	}
	return 0, false
}

// hasStandaloneNumber is hasStandaloneNumber(the lower-case message, codes...).
func (c *facts) hasStandaloneNumber(codes ...int) bool {
	_, ok := c.standaloneNumber(codes...)
	return ok
}

// quote is strconv.Quote, without its work in the usual case: printable
// ASCII without '"' and '\\' is quoted as it is.
func quote(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.Quote(s)
		}
	}
	return `"` + s + `"`
}

// limitReason is limitReasonOf(the message), computed once.
func (c *facts) limitReason() limitReason {
	if !c.reasonKnown {
		c.reason, c.reasonKnown = limitReasonOf(c), true
	}
	return c.reason
}

// accountRateLimited is accountRateLimited(the message), computed once.
func (c *facts) accountRateLimited() bool {
	if !c.accountKnown {
		c.account, c.accountKnown = accountRateLimited(&c.words), true
	}
	return c.account
}

// overflowCodes are structured context-overflow signals.
var overflowCodes = map[string]bool{
	"context_length_exceeded":       true,
	"model_context_window_exceeded": true,
	"context_window_exceeded":       true,
	"request_too_large":             true,
}

func (c *facts) overflow() (string, bool) {
	if r, ok := c.hasCode(overflowCodes); ok {
		return r, true
	}
	if c.status == http.StatusRequestEntityTooLarge {
		return "HTTP status 413", true
	}
	if m, ok := overflowStrongRE.Find(&c.words); ok {
		return "text matches " + quote(m), true
	}
	if m, ok := overflowGapped.Find(&c.words); ok {
		return "text matches " + quote(m), true
	}
	if m, ok := overflowWeakRE.Find(&c.words); ok && c.textStatus != http.StatusTooManyRequests && !throttleRE.Match(&c.words) {
		return "text matches " + quote(m), true
	}
	return "", false
}

// responsesAPIs are the provider kinds that replay stored Responses state.
var responsesAPIs = map[string]bool{
	"openai-responses":       true,
	"openai-codex-responses": true,
	"azure-openai-responses": true,
}

func (c *facts) stale() (string, StaleCase, bool) {
	if r, sc, ok := c.staleReasoning(); ok {
		return r, sc, true
	}
	if c.code == "previous_response_not_found" {
		return `error code "previous_response_not_found": stale Responses replay`, StaleResponsesState, true
	}
	if !responsesAPIs[strings.ToLower(strings.TrimSpace(c.f.API))] {
		return "", StaleNone, false
	}
	if m, ok := staleItemRE.Find(&c.words); ok {
		return "stale Responses replay: text matches " + quote(m), StaleResponsesState, true
	}
	if start, end, ok := stalePrevRE.FindIn(&c.words); ok {
		if ds, de, ok := staleDetailRE.FindIn(&c.words); ok && de > ds {
			return "stale Responses replay: " + quote(c.words.S[start:end]) + " with " + quote(c.words.S[ds:de]), StaleResponsesState, true
		}
	}
	return "", StaleNone, false
}

// staleReasoning recognises reasoning state a provider refuses. Chat
// Completions replays none, so a Chat API's failure is never one.
func (c *facts) staleReasoning() (string, StaleCase, bool) {
	if strings.EqualFold(strings.TrimSpace(c.f.API), "openai-chat") {
		return "", StaleNone, false
	}
	if c.code == "invalid_encrypted_content" {
		return `stale reasoning state: error code "invalid_encrypted_content" (strip the reasoning items and retry)`, StaleReasoningEncrypted, true
	}
	for i, p := range staleReasoningRE {
		if m, ok := p.Find(&c.words); ok {
			sc := staleReasoningCases[i]
			return "stale reasoning state: text matches " + quote(m) + " (" + staleReasoningAdvice[sc] + ")", sc, true
		}
	}
	return "", StaleNone, false
}

// staleReasoningAdvice is what the session does about each case.
var staleReasoningAdvice = map[StaleCase]string{
	StaleReasoningSignature: "strip the thinking blocks the target did not make and retry",
	StaleReasoningOrder:     "retry with thinking off until the tool loop ends",
	StaleReasoningEncrypted: "strip the reasoning items and retry",
}

// usageCodes are structured usage-limit signals (OpenAI billing codes,
// Anthropic spend limit and billing_error, Codex usage limits, gRPC
// RESOURCE_EXHAUSTED as Gemini reports it).
var usageCodes = map[string]bool{
	"usage_limit_reached":               true,
	"usage_not_included":                true,
	"insufficient_quota":                true,
	"insufficient_balance":              true,
	"credit_balance_exhausted":          true,
	"organization_usage_limit_exceeded": true,
	"organization_spend_limit_exceeded": true,
	"project_spend_limit_exceeded":      true,
	"enforced_spend_limit_reached":      true,
	"billing_hard_limit_reached":        true,
	"billing_not_active":                true,
	"billing_error":                     true,
	"quota_exceeded":                    true,
	"resource_exhausted":                true,
	"payment_required":                  true,
}

// rateLimitCodes are the codes of ordinary throttling.
var rateLimitCodes = map[string]bool{
	"rate_limit_error":    true,
	"rate_limit_exceeded": true,
	"rate_limit_reached":  true,
	"too_many_requests":   true,
}

func (c *facts) usage(hint time.Duration, hasHint bool) (string, bool) {
	if r, ok := c.hasCode(usageCodes); ok {
		return r, true
	}
	if c.status == http.StatusPaymentRequired {
		return "HTTP status 402", true
	}
	if strings.EqualFold(strings.TrimSpace(c.hdrs.get(hdrUnifiedStatus)), "rejected") {
		return "anthropic-ratelimit-unified-status: rejected (subscription window drained)", true
	}
	if m, ok := usageRE.Find(&c.words); ok {
		return "usage limit: text matches " + quote(m), true
	}
	if c.accountRateLimited() {
		return "account-level rate limit (usage limit)", true
	}
	is429 := c.textStatus == http.StatusTooManyRequests || c.status == http.StatusTooManyRequests
	if isOpaque(c.lower) && (is429 || c.hasStandaloneNumber(http.StatusTooManyRequests)) {
		return "opaque 429 (no explanation in the body)", true
	}
	if is429 && c.limitReason() == reasonQuota {
		return "429 with quota wording", true
	}
	if hasHint && hint >= LongRateLimitHint {
		_, coded := c.hasCode(rateLimitCodes)
		if is429 || coded || reasonRateRE.Match(&c.words) {
			return "rate limited with a " + hint.String() + " hint (a usage window, not throttling)", true
		}
	}
	return "", false
}

// transientCodes are structured transient signals (Anthropic error types,
// OpenAI codes, gRPC/Gemini statuses, Azure codes after codeKey).
var transientCodes = map[string]bool{
	"overloaded_error":          true,
	"api_error":                 true,
	"rate_limit_error":          true,
	"rate_limit_exceeded":       true,
	"rate_limit_reached":        true,
	"too_many_requests":         true,
	"server_error":              true,
	"internal_error":            true,
	"internal_server_error":     true,
	"service_unavailable":       true,
	"service_unavailable_error": true,
	"server_overloaded":         true,
	"overloaded":                true,
	"unavailable":               true,
	"internal":                  true,
	"deadline_exceeded":         true,
	"timeout":                   true,
	"timeout_error":             true,
	"stream_read_error":         true,
	"conflict_error":            true,
	"upstream_error":            true,
}

func (c *facts) transient() (string, bool) {
	if r, ok := c.hasCode(transientCodes); ok {
		return r, true
	}
	switch s := c.status; {
	case s == http.StatusRequestTimeout, s == http.StatusTooManyRequests:
		return "HTTP status " + strconv.Itoa(s), true
	case s >= 500 && s <= 599 && s != http.StatusNotImplemented && s != http.StatusHTTPVersionNotSupported:
		return "HTTP status " + strconv.Itoa(s), true
	}
	if c.textStatus == http.StatusBadRequest && strings.Contains(c.words.S, "model_not_supported") {
		return "model_not_supported on 400 (Copilot flap)", true
	}
	if anthropicEnvelopeRE.MatchIn(&c.words) && beforeMessageStartRE.MatchIn(&c.words) {
		return "Anthropic stream envelope error before message_start", true
	}
	if m, ok := transientRE.Find(&c.words); ok {
		return "text matches " + quote(m), true
	}
	// A known 4xx status (other than 408/429) outranks numbers in the text:
	// "max_tokens: 503 is too small" on a 400 is not a server error.
	if !(c.status >= 400 && c.status < 500) {
		if n, ok := c.standaloneNumber(transientStatusNumbers...); ok {
			return "status " + strconv.Itoa(n) + " in text", true
		}
	}
	return "", false
}

// accountRateLimited reports an account-level rate limit (a usage limit)
// that is not explicitly per-minute throttling.
func accountRateLimited(w *match.Subject) bool {
	return accountRE.MatchIn(w) && accountNearRateLimit(w.S) && !perMinuteRE.Match(w)
}

// accountRE is the literal an account-level rate limit needs: matched
// through the literal index, it spares most messages accountNearRateLimit.
var accountRE = match.Compile(`account`)

// limitReason is the reference's parseRateLimitReason result.
type limitReason int

const (
	reasonUnknown limitReason = iota
	reasonQuota
	reasonCapacity
	reasonRate
	reasonServer
)

func limitReasonOf(c *facts) limitReason {
	w := &c.words
	switch {
	case reasonQuotaFirstRE.Match(w):
		return reasonQuota
	case reasonCapacityRE.Match(w), c.hasStandaloneNumber(529, 503):
		return reasonCapacity
	case c.accountRateLimited():
		return reasonQuota
	case reasonPerDayRE.Match(w):
		return reasonQuota
	case reasonRateRE.Match(w):
		return reasonRate
	case reasonQuotaRE.Match(w):
		return reasonQuota
	case reasonServerRE.Match(w), c.hasStandaloneNumber(500):
		return reasonServer
	}
	return reasonUnknown
}

// usageEstimate is the reference's calculateRateLimitBackoffMs, with the
// model-capacity range (45–75 s) fixed at its middle so that classification
// stays deterministic.
func (r limitReason) usageEstimate() time.Duration {
	switch r {
	case reasonRate:
		return 30 * time.Second
	case reasonCapacity:
		return 60 * time.Second
	case reasonServer:
		return 20 * time.Second
	}
	return DefaultUsageWindow
}

// cooldown is the model-selector suppression of docs/retry-policy.md §4: as
// usageEstimate, except 5 minutes for an unknown reason.
func (r limitReason) cooldown() time.Duration {
	if r == reasonUnknown {
		return 5 * time.Minute
	}
	return r.usageEstimate()
}
