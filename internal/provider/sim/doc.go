// Package sim is agentd's simulated provider (kind "simulated", model
// references such as "sim/echo"). It answers without a network, and plays
// fault scripts written into the prompt so that anyone can watch a retry
// chain end to end, and it serves load tests with a configurable latency and
// token rate.
//
// # Answers
//
// The answer echoes the text of the latest user message, with its
// directives removed and surrounding whitespace trimmed, prefixed with
// "echo: ". It streams word by word: one [provider.Delta] per word,
// including the whitespace that follows it, so the deltas concatenate to
// the final text. [Options.FirstTokenDelay] passes before the first delta
// (and before an error answer), [Options.TokenDelay] between deltas. Usage
// counts words as tokens: the prompt is every word of the request's system
// prompt and messages, output every word streamed. A simulated prompt
// cache, one per account and model as the real ones are, splits the prompt:
// the longest prefix (system prompt, then whole messages) that an earlier
// request of the same account and model sent is cache read, the rest but
// the last message cache write, the last message input. So an agent loop's
// second turn reads its first turn back, and a switch to a credential of
// another account starts cold. [Options.NoPromptCache] turns it off (all
// input).
//
// A prompt with no text left after its directives are removed is answered
// with "echo: (empty prompt)".
//
// # Thinking
//
// A request that asks for thinking ([provider.Params].Thinking) streams
// thinking deltas first — a sentence about the prompt, longer for a higher
// effort — and its answer starts with a thinking block signed by
// [Signature] (only a call that ends well is signed: a failed or aborted
// call's thinking is display only, as with the real providers). Thinking
// words count as output tokens.
//
// # Directives
//
// Directives are written into the user message, anywhere in its text.
// Names are case-insensitive; whitespace around names, values and
// punctuation is ignored. Each may appear at most once.
//
//	[[tokens: N]]           answer with N words (1..100000) of lorem ipsum
//	                        instead of the echo (for load tests)
//	[[faults: step,step,…]] the fault script
//
// # Fault scripts
//
// The n-th step of the script plays on the n-th model call of the prompt,
// that is on the call with [provider.Request.Call] == n-1 (retries and
// tool-loop turns count). Calls past the end of the script answer normally.
// So "[[faults: 529,429:retry-after=2,ok]]" fails the first call with an
// overloaded error, the second with a rate limit asking for a 2 s wait, and
// answers the third and every later one.
//
// Grammar (steps and option keys are case-insensitive):
//
//	directive = "[[" "faults" ":" step { "," step } "]]"
//	          | "[[" "tokens" ":" number "]]" .
//	step      = kind { ":" option } .
//	kind      = "ok" | status | "overloaded-stream" | "midstream" | "cut"
//	          | "reset" | "timeout" | "overflow" | "usage" | "stale"
//	          | "stale-reasoning" | "refusal" | "abort" | "hang" .
//	status    = "400" | "401" | "403" | "404" | "408" | "409" | "413"
//	          | "429" | "500" | "502" | "503" | "504" | "529" .
//	option    = key "=" value .
//
// Steps. Wordings are the providers' own (docs/retry-policy.md §6);
// "T: M" below is the error type and message that [provider.HTTPErrorMessage]
// formats into the error message, e.g. "529 overloaded_error: Overloaded".
//
//	ok                 the normal answer.
//	400                invalid_request_error: messages: roles must alternate between "user" and "assistant"
//	401                authentication_error: invalid x-api-key
//	403                permission_error: OAuth authentication is currently not allowed for this organization.
//	                   (code oauth_not_allowed_for_organization)
//	404                not_found_error: model: <the requested model>
//	408                no error body (an edge answer): "408 Request Timeout"
//	409                conflict_error, no message: "409 conflict_error"
//	413                request_too_large: Request exceeds the maximum size
//	429                rate_limit_error: Number of request tokens has exceeded your per-minute rate limit (…)
//	500                api_error: Internal server error
//	502                no error body (an edge answer): "502 Bad Gateway"
//	503                no error body (an Envoy answer): "503 upstream connect error or
//	                   disconnect/reset before headers. reset reason: connection failure"
//	504                timeout_error: The request timed out while processing.
//	529                overloaded_error: Overloaded
//	overloaded-stream  the stream starts (HTTP 200, no content), then an Anthropic
//	                   "event: error" overloaded_error: "200 overloaded_error: Overloaded".
//	midstream          streams part of the answer, then the connection fails:
//	                   "stream error: stream ID 1; INTERNAL_ERROR; received from peer".
//	cut                streams the answer, then the stream ends without its terminal
//	                   event: "stream ended before message_stop: unexpected EOF".
//	reset              transport failure before any response (status 0):
//	                   "read tcp 127.0.0.1:52814->127.0.0.1:443: read: connection reset by peer".
//	timeout            transport failure before any response (status 0): "Request timed out."
//	overflow           context overflow, 400 invalid_request_error:
//	                   "prompt is too long: 205351 tokens > 200000 maximum".
//	usage              usage limit, OpenAI's 429 insufficient_quota (type and code):
//	                   "You exceeded your current quota, please check your plan and billing details. …".
//	stale              OpenAI Responses stale replay, 400 invalid_request_error with code
//	                   previous_response_not_found: "Previous response with id 'resp_…' not found.";
//	                   the result has ResetState set.
//	stale-reasoning    stale reasoning state, Anthropic's 400 invalid_request_error:
//	                   "messages.1.content.0: Invalid `signature` in `thinking` block"
//	                   (a thinking block signed for another model or account).
//	refusal            a classifier refusal: stop reason error, stop details "refusal",
//	                   "Refusal (cyber): Classifier declined this turn.", no content.
//	abort              a reasonless abort: stop reason aborted, "Request was aborted",
//	                   no content, although the context is live.
//	hang               waits until the context is done, then ends aborted.
//
// Midstream and cut keep what was streamed in the result's content, report
// HTTP status 200 in the result's Failure (the stream had started) and set
// stop details [provider.DetailInterruptedAfterContent]; a hang keeps what it
// streamed before it hung. Every other failure has no content. HTTP error
// answers carry their status, error type, code and response headers in the
// result's Failure; reset and timeout carry a Failure with status 0.
//
// Options (key=value; several are separated by ":"):
//
//	delay=N           any step: N more milliseconds (0..3600000) before the step plays.
//	retry-after=N     HTTP error steps (statuses, overflow, usage, stale,
//	                  stale-reasoning): sets the retry-after header, N seconds
//	                  (digits, optional decimals).
//	retry-after-ms=N  HTTP error steps: sets the retry-after-ms header, N milliseconds.
//	reset=V           HTTP error steps: V is an RFC 3339 time or a Go duration from
//	                  now (e.g. 90s, 5h). Anthropic-worded answers get
//	                  anthropic-ratelimit-requests-reset (RFC 3339); OpenAI-worded
//	                  ones (usage, stale) get x-ratelimit-reset-requests (a Go duration).
//	after=N           midstream, cut, hang: stream N words (1..100000) before failing
//	                  (or hanging). Defaults: midstream half the answer (at least one
//	                  word), cut the whole answer, hang none.
//
// For example:
//
//	[[faults: 429:retry-after=2:reset=2026-08-21T12:40:59Z, midstream:after=3, ok:delay=500]]
//
// Every HTTP error answer carries a request id header: request-id on
// Anthropic-worded answers, x-request-id on OpenAI-worded ones.
//
// [ParseScript] checks a prompt's directives; a bad one is rejected with an
// error naming the step, e.g. `faults step 2: unknown step "foo"`. Stream
// answers a bad script it is given anyway with a 400 invalid_request_error
// carrying the same text.
package sim
