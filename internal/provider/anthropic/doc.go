// Package anthropic is agentd's client for the Anthropic Messages API
// (provider kind "anthropic"): one streaming POST /v1/messages per call,
// reported through the [provider.Provider] contract.
//
// # Configuration
//
// [Options.BaseURL] is the API root without "/v1", the convention of the
// Anthropic SDKs and of ANTHROPIC_BASE_URL (default
// https://api.anthropic.com; a trailing "/v1" is tolerated). The
// credential's secret goes in x-api-key (or "Authorization: Bearer …" with
// AuthHeader "Authorization", for gateways and OAuth tokens) and nowhere
// else; anthropic-version is 2023-06-01 unless Options.Version says
// otherwise; Options.Headers adds headers (anthropic-beta, a gateway's).
// Every request asks for max_tokens = Options.MaxTokens, 8192 by default
// (unless the request's Params say otherwise): enough for long answers and
// tool calls on every current model, and a bound on the cost of a runaway
// answer. Options.Timeout bounds a whole
// call, Options.ReadTimeout the provider's silence (from sending the
// request on).
//
// # Requests
//
// The system prompt goes in "system", tools in "tools" (input_schema; a
// tool without a schema gets {"type":"object"}). Messages map as follows
// (function messages in request.go): user and tool messages are user turns
// with tool_result blocks, assistant turns carry text, redacted_thinking
// and tool_use blocks; an assistant message that ended in error or was
// aborted without content is skipped, and so is a message left without
// content; consecutive same-role turns are merged so that roles alternate.
//
// Model parameters ([provider.Params]): max_tokens (Params.MaxTokens, else
// Options.MaxTokens), temperature, top_p, stop_sequences, and thinking
// {"type": "enabled", "budget_tokens": N} where N is Thinking.BudgetTokens
// or the effort's budget (low 1024, medium 4096 — the default —, high 16384;
// [provider.EffortBudget]). The API wants budget_tokens below max_tokens:
// when it is not, max_tokens becomes the budget plus Options.MaxTokens, so
// the answer keeps its configured room ([provider.ValidateParams] refuses
// such a budget beside an explicit max_tokens, and temperature or top_p the
// API refuses while thinking is on).
//
// # Reasoning state
//
// Thinking blocks come back with their signature (signature_delta, just
// before content_block_stop; a block may have a signature and no text) in
// Block.Signature, redacted_thinking blocks with their opaque data in
// Block.Data, byte for byte. A later request sends them back as they came —
// {"type": "thinking", "thinking": …, "signature": …} (the thinking text
// even when empty) and {"type": "redacted_thinking", "data": …} — in their
// place in the assistant turn. Thinking without a signature (another
// kind's, or a failed call's) is display only and not sent, and with
// thinking off a final assistant turn (a prefill) is sent without its
// thinking blocks, which the API refuses there. Anthropic binds
// signatures to the model and account that made them: a replay to another
// refuses the request ("messages.N.content.M: Invalid `signature` in
// `thinking` block"), and with thinking on the final assistant message of
// an open tool loop must start with a thinking block; retry classifies both
// as stale reasoning, and the session strips (or turns thinking off) before
// it retries (see package provider's reasoning.go).
//
// # Results
//
// Deltas are delivered as they arrive: text_delta as Delta.Text,
// thinking_delta as Delta.Thinking (signatures are not delivered), a tool_use block's id and name at
// content_block_start and its input_json_delta pieces as ToolArgsPart.
// Stop reasons: end_turn, stop_sequence and pause_turn → stop; max_tokens
// and model_context_window_exceeded → length; tool_use → toolUse; refusal →
// error with StopDetails "refusal" and "Refusal (<category>):
// <explanation>" from stop_details. Usage: input_tokens,
// cache_read_input_tokens and cache_creation_input_tokens as InputTokens,
// CacheReadTokens and CacheWriteTokens (apart, as the API counts them) from
// message_start, replaced by message_delta's when it repeats them; output
// (thinking included) from message_delta. No reasoning count.
//
// Failures are Results with StopReason "error", the provider's wording
// formatted by [provider.HTTPErrorMessage], and a [provider.Failure]:
//
//   - an error answer (any status but 200, or a 200 with a JSON body): its
//     status, headers, error.type and error.code or error.details.error_code
//     (Cloudflare's 413 body without a top-level "type", non-JSON bodies and
//     HTML pages included);
//   - "event: error" in the stream: status 200, the response's headers and
//     the event's type;
//   - a transport failure before the response: status 0 and the Go error's
//     text (connection refused, reset, TLS errors, timeouts);
//   - a stream that ends before message_stop: "anthropic stream envelope
//     error: stream ended before message_start: …" when nothing had
//     started (a transient failure), else "stream ended before
//     message_stop: …", with status 200.
//
// A failure after observable output carries StopDetails
// STREAM_INTERRUPTED_AFTER_CONTENT; the content keeps what streamed, minus
// tool calls whose input never completed and minus reasoning state (a
// failed or aborted call's thinking keeps its text, never its signature,
// and its redacted blocks are dropped: it is never replayed). A cancelled context ends the call
// with StopReason "aborted" and [provider.AbortedMessage], keeping the
// partial content. Error texts are redacted of the key and of anything
// key-shaped a provider echoes.
//
// # Why no SDK
//
// The client is a small hand-written SSE client (shared with package
// openai: package internal/provider/internal/wire) rather than
// anthropic-sdk-go:
//
//   - the SDK cannot tell a stream cut cleanly before message_stop from a
//     complete one (its decoder ends without error at EOF), while agentd
//     must report the cut, and whether message_start had arrived;
//   - agentd needs every failure with the raw status, headers, error.type
//     and details.error_code, its own timeouts (whole call and silence)
//     and observable-output tracking at each byte; with the SDK most of
//     that means re-parsing its errors' raw JSON;
//   - the SDK's default options read ANTHROPIC_API_KEY,
//     ANTHROPIC_AUTH_TOKEN and ANTHROPIC_BASE_URL from the environment, so
//     a request could carry a second secret, or go elsewhere, than the
//     configured credential and base_url;
//   - the wire format is small and stable, and the package has no
//     dependency to keep in step with API versions.
//
// The HTTP client never follows redirects (Go strips Authorization on a
// cross-host redirect, but not x-api-key). Stream starts no goroutine that
// outlives it; the response body is closed on every path (read to its end
// after the terminal event, so that the connection is reused), and a
// cancelled context closes the connection.
package anthropic
