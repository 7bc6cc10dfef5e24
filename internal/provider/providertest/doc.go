// Package providertest is a fake LLM provider: an [http.Handler] (and a
// loopback [Server]) that speaks the streaming wire formats of the provider
// kinds agentd calls — Anthropic Messages, OpenAI Responses, OpenAI Chat
// Completions and Gemini streamGenerateContent — byte for byte as the providers send them, and
// plays a scripted fault per request. agentd's provider
// client tests use it over real loopback HTTP; so can end-to-end tests, a
// mock-provider command and load tests (pacing is configurable).
//
// # Routes
//
// POST …/messages, …/responses and …/chat/completions, under any prefix
// ("/v1/messages", "/openai/v1/responses"), and Gemini's
// …/models/{model}:streamGenerateContent (gemini.go: data: frames ended by
// \r\n\r\n, Google's pretty-printed error envelope with google.rpc
// details, thought signatures bound to account and model; the key in
// x-goog-api-key). Vertex AI's
// …/projects/{p}/locations/{l}/publishers/google/models/{model}:streamGenerateContent
// is Gemini's with a bearer token (Options.Authorize, e.g.
// TokenServer.Valid, decides which; a refused one gets Vertex's 401), and
// Azure's …/openai/responses the Responses API with api-version. Every
// OpenAI answer carries x-request-id, every Anthropic one request-id.
//
// # Token endpoint
//
// [TokenServer] is a fake OAuth 2.0 token endpoint (token.go): Google's
// JWT bearer grant of a service-account key it makes
// ([TokenServer.ServiceAccountKey]), whose RS256 assertion and claims it
// verifies, and Entra ID's client-credentials grant; it counts its
// requests, issues TokenN(n), and plays queued error answers
// (GoogleInvalidGrant, EntraInvalidClient, a 503).
//
// # Steps
//
// Each request plays one [Step]: the next one queued with
// [Handler.Enqueue], else the one [Options.Script] returns for it, else the
// default answer. A step either streams an [Answer] (text, thinking and
// tool-call deltas, a stop reason, usage) or fails:
//
//	StepOK          the whole stream, terminal event included
//	StepHTTPError   Status with Body (default: the kind's canonical body,
//	                see [Body]) and Headers (retry-after, rate limits, …);
//	                with status 200 and a text/event-stream body, a
//	                hand-written stream
//	StepErrorEvent  a 200 stream, After body frames, then the kind's
//	                mid-stream error (Anthropic "event: error", Chat
//	                "data: {"error": …}", Responses "error" nested or flat,
//	                or response.failed; see ErrorShape, ThenFailed)
//	StepCut         a 200 stream, After body frames, then a clean end of the
//	                body without the terminal event (SkipPreamble: right
//	                after the headers, e.g. EOF before message_start)
//	StepReset       a TCP reset (RST) before any byte (BeforeHeaders) or
//	                after After body frames
//	StepHang        no more bytes until the client goes away, before the
//	                headers (BeforeHeaders) or after After body frames
//
// A stream is a lifecycle preamble (Anthropic message_start; Responses
// response.created and response.in_progress; Chat the role chunk), body
// frames (content blocks, deltas, items, the stop), and terminal frames
// (message_stop; response.completed or response.incomplete; data: [DONE]).
// After counts body frames; [AllFrames] sends them all, so a cut then lacks
// only the terminal frames. Hold pauses a stream after HoldAfter body
// frames until a channel is closed, so that a test can see deltas arrive
// before the stream ends.
//
// # Reasoning state
//
// The fake keeps the providers' rules for reasoning state (reasoning.go).
// Anthropic thinking blocks are signed for the account of the request's key
// ([Options].Accounts; unmapped keys belong to [DefaultAccount]), the model
// and the thinking text ([AnthropicSignature]); a request whose history
// holds a thinking block with a missing, altered or foreign signature gets
// Anthropic's 400 ([AnthropicInvalidSignature]), and with thinking enabled
// a final assistant tool-use message that does not start with thinking
// gets the 400 of [AnthropicThinkingOrderFormat]. Responses reasoning items
// carry encrypted_content bound to the key's organisation when the request
// includes "reasoning.encrypted_content" ([OpenAIEncryptedContent]);
// another organisation's or altered content gets OpenAI's 400
// invalid_encrypted_content ([OpenAIInvalidEncryptedContent]), a reasoning
// item without it under store: false the 404 of [OpenAIItemNotFound].
// [Answer].Redacted and EmptyThinking stream redacted_thinking and
// signature-only blocks (an empty reasoning summary);
// Options.NoReasoningChecks turns the checks off.
//
// # Recording
//
// Every request is recorded ([Handler.Requests], [Handler.WaitRequests]):
// path, headers, body, the step played, and whether the client went away
// before the answer was over (ClientGone) — the evidence that a cancelled
// call closed its connection.
//
// Everything is deterministic: ids derive from the request's index, times
// are fixed, and nothing waits on the clock but the configured pacing
// (Options.Delay, Options.ChunkDelay, Step.Delay) and the hangs, which end
// when the client goes away or the handler is closed.
package providertest
