// Package gemini is agentd's client of the Gemini API (Google AI, provider
// kind "gemini"): POST {base}/models/{model}:streamGenerateContent?alt=sse
// with the API key in x-goog-api-key (never in the URL's ?key=, which would
// put it in logs).
//
// # Request
//
// The runtime context maps onto contents (role "user" and "model"):
// user text parts, tool results as functionResponse parts named after the
// call they answer ({"result": text}, {"error": text} for an error result),
// assistant text and functionCall parts. Tools are functionDeclarations
// with parametersJsonSchema (the tool's JSON Schema as it is). The system
// prompt is systemInstruction. Params map onto generationConfig:
// maxOutputTokens, temperature, topP, stopSequences (at most 5), and
// Params.Thinking onto thinkingConfig {includeThoughts: true,
// thinkingBudget: Budget()}.
//
// # Stream
//
// Every data: frame is a GenerateContentResponse; the last carries the
// candidate's finishReason (there is no [DONE]). Text parts stream as text
// deltas; thought parts ("thought": true) as thinking; a functionCall comes
// whole in one part and becomes a completed tool call (id: the call's own
// id when Gemini sends one, else "call_<responseId>_<n>" — Gemini matches
// results by name and order).
//
// Thought signatures ("thoughtSignature" on a part) are reasoning state: a
// signature becomes a thinking block of its own (Block.Signature), placed
// just before the part it came on, and is sent back on that part — the
// first part after it in the message — to the same provider, model and
// account only (the session strips foreign reasoning state by Origin, as
// for Anthropic signatures). A failed or aborted call keeps no signature.
// Thought text is display only and never sent back.
//
// finishReason STOP ends the turn (tool use when it made calls),
// MAX_TOKENS is StopLength; SAFETY, RECITATION, BLOCKLIST,
// PROHIBITED_CONTENT, SPII, IMAGE_SAFETY and LANGUAGE are errors with
// StopDetails "sensitive", as is a prompt blocked by
// promptFeedback.blockReason; MALFORMED_FUNCTION_CALL, OTHER and unknown
// reasons are errors whose failure type is the reason.
//
// # Usage
//
// usageMetadata: InputTokens is promptTokenCount (+ toolUsePromptTokenCount)
// less cachedContentTokenCount, which is CacheReadTokens (so the input-side
// numbers add up to the prompt); OutputTokens is candidatesTokenCount +
// thoughtsTokenCount (thinking is billed as output), ReasoningTokens
// thoughtsTokenCount.
//
// # Failures
//
// Error answers are Google's envelope {"error": {"code", "message",
// "status", "details"}}: the message is "<status> <STATUS>: <message>", the
// failure's Type the status name (RESOURCE_EXHAUSTED, UNAVAILABLE, …), Code
// the numeric code, Body the body as it came (redacted, at most 64 KiB) so
// that the retry engine reads google.rpc.RetryInfo and QuotaFailure. A
// data: {"error": …} frame mid-stream is the same, with status 200. A
// stream that ends before finishReason is an error ("stream ended before
// finishReason"; before any chunk "gemini stream ended before its first
// chunk"), never a silent stop. Redirects are not followed; the key never
// appears in a result (error texts and bodies are redacted).
package gemini
