// Package openai is agentd's client for the OpenAI Responses API (provider
// kind "openai-responses", POST /responses) and Chat Completions API (kind
// "openai-chat", POST /chat/completions), and for OpenAI-compatible servers
// (Azure OpenAI, vLLM, gateways), streaming, reported through the
// [provider.Provider] contract.
//
// # Configuration
//
// [Options.BaseURL] includes the version path, as in the OpenAI SDKs and
// OPENAI_BASE_URL (default https://api.openai.com/v1): requests go to
// BaseURL+"/responses" or BaseURL+"/chat/completions". A URL with no path
// gets "/v1" (http://127.0.0.1:8000 is http://127.0.0.1:8000/v1), a URL
// already ending in the endpoint is used as is, and a query string is kept.
// Azure OpenAI: BaseURL https://<resource>.openai.azure.com/openai/v1 (or a
// deployment URL with ?api-version=…) and AuthHeader "api-key"; other
// gateways' headers go in Options.Headers. The credential's secret goes in
// "Authorization: Bearer …" (or the AuthHeader named) and nowhere else.
// Options.Timeout bounds a whole call, Options.ReadTimeout the provider's
// silence.
//
// # Requests
//
// Responses: "instructions" is the system prompt, "input" the context as
// message, function_call and function_call_output items, tools are
// function tools with strict false; Chat: a system message, then user,
// assistant (text and tool_calls) and tool messages, with
// stream_options.include_usage. Usage (both APIs): the prompt tokens less
// their cached_tokens as InputTokens, cached_tokens as CacheReadTokens (no
// cache-write count: OpenAI bills writes as input), output as OutputTokens
// and its reasoning_tokens as ReasoningTokens. Assistant messages that ended in error or
// were aborted without content are skipped; Chat sends no thinking back.
//
// Model parameters ([provider.Params]): Responses max_output_tokens,
// temperature, top_p and reasoning {"effort": Thinking's effort (medium by
// default), "summary": "auto"} — the Responses API has no stop sequences
// and no token budget, which [provider.ValidateParams] refuses; Chat
// max_completion_tokens, temperature, top_p, stop and reasoning_effort.
//
// # Reasoning state (Responses)
//
// A reasoning output item (response.output_item.done of type "reasoning")
// becomes a thinking block with its id (Block.ReasoningID), its summary
// parts (Block.Summary; the text shows them separated by a blank line, as
// the deltas do) and, when asked for, its encrypted_content. With
// Options.EncryptedReasoning every call sends store: false and include:
// ["reasoning.encrypted_content"], and a later call sends the item back as
// a reasoning input item {"type": "reasoning", "id", "summary":
// [{"type": "summary_text", "text"}…], "encrypted_content"}, byte for byte
// and in its place before the items that followed it; a reasoning item
// without encrypted content (store: false kept nothing) or that nothing
// follows is not sent. OpenAI binds encrypted content to the organisation
// that made it: another's is refused (code invalid_encrypted_content),
// which retry classifies as stale reasoning. EncryptedReasoning is the
// stateless alternative to ChainResponses and turns it off. A failed or
// aborted call keeps no reasoning state.
//
// # Chaining (Responses)
//
// With Options.ChainResponses, responses are stored (store: true) and a
// session's next call (by [provider.Request.SessionID]) sends only the
// messages its last response does not cover, with previous_response_id.
// The client remembers, per session, the last response's id, how many
// context messages it covers and a fingerprint of them and of the model;
// a context that changed underneath, another model, or no remembered
// response sends the whole context. The memory is bounded
// (Options.ChainCacheSize sessions, least recently used out);
// [Client.Forget] drops a session. A stale replay — code
// previous_response_not_found, "Item with id '…' not found", or a previous
// response not found, invalid or expired — drops the session's state and
// sets Result.ResetState, so that the retry resends the whole context.
// Without ChainResponses every call sends the whole context with store:
// false.
//
// # Results
//
// Deltas are delivered as they arrive (output_text, reasoning summary and
// reasoning text, function-call arguments; Chat content, reasoning_content
// of compatible servers, tool_calls). The Responses lifecycle preamble
// (response.created, in_progress, queued) is not observable output: an
// error right after it has nothing streamed and stays retryable. Stop
// reasons: completed → stop, or toolUse with a completed function call;
// incomplete max_output_tokens → length; Chat finish_reason stop, length,
// tool_calls; a refusal → error with StopDetails "refusal"; a content
// filter (finish_reason content_filter, incomplete content_filter) → error
// with StopDetails "sensitive".
//
// Failures are Results with StopReason "error", the provider's wording
// formatted by [provider.HTTPErrorMessage] (an error with a code but no
// type shows its code), and a [provider.Failure] with status, headers,
// error.type and error.code: error answers before the stream; in-stream
// errors with status 200 (Chat "data: {"error": …}", Responses "error"
// events in both the nested and the flat shape, response.failed; the first
// error ends the call); transport failures with status 0 and the Go error's
// text; a stream that ends before its terminal event ("stream ended before
// response.completed: …" / "… before [DONE]: …", status 200). A Chat
// stream whose body ends cleanly after its finish_reason but without
// [DONE] is accepted, since some compatible servers omit it. A failure
// after observable output carries StopDetails
// STREAM_INTERRUPTED_AFTER_CONTENT, incomplete tool calls are stripped, a
// cancelled context ends the call "aborted" with the partial content, and
// error texts are redacted of the key and of key-shaped echoes ("Incorrect
// API key provided: sk-abc***…").
//
// # Why no SDK
//
// As in package anthropic, a small hand-written SSE client (package
// internal/provider/internal/wire, shared) rather than openai-go: the SDK
// turns Chat's in-stream {"error": …} and the Responses nested error event
// into a formatted string ("received error while streaming: {…}") that must
// be re-parsed for its type and code, parses only the flat error shape
// itself, cannot tell a cut Responses stream from a complete one, and its
// default options read OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID and
// OPENAI_PROJECT_ID from the environment. agentd needs raw statuses,
// headers, codes, its own timeouts, observable-output tracking and
// byte-level control of both formats, which a few hundred lines give
// directly.
package openai
