package retry

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// testNow is the fixed clock of the tests.
var testNow = time.Date(2025, 8, 21, 12, 40, 0, 0, time.UTC)

// opt modifies a test Failure.
type opt func(*Failure)

func status(n int) opt      { return func(f *Failure) { f.Status = n } }
func api(s string) opt      { return func(f *Failure) { f.API = s } }
func code(s string) opt     { return func(f *Failure) { f.ErrorCode = s } }
func typ(s string) opt      { return func(f *Failure) { f.ErrorType = s } }
func details(s string) opt  { return func(f *Failure) { f.StopDetails = s } }
func stop(s string) opt     { return func(f *Failure) { f.StopReason = s } }
func observable() opt       { return func(f *Failure) { f.ObservableOutput = true } }
func hdr(k, v string) opt   { return func(f *Failure) { setHeader(f, k, v) } }
func body(s string) opt     { return func(f *Failure) { f.Body = s } }
func window(cw, in int) opt { return func(f *Failure) { f.ContextWindow, f.InputTokens = cw, in } }
func setHeader(f *Failure, k, v string) {
	if f.Headers == nil {
		f.Headers = http.Header{}
	}
	f.Headers.Set(k, v)
}

// failure builds a Failure with stopReason "error".
func failure(msg string, opts ...opt) Failure {
	f := Failure{StopReason: "error", ErrorMessage: msg}
	for _, o := range opts {
		o(&f)
	}
	return f
}

type classifyCase struct {
	name string
	f    Failure
	want Class
}

const (
	tr  = ClassTransient
	use = ClassUsageLimit
	ovf = ClassContextOverflow
	stl = ClassStaleReplay
	ref = ClassRefusal
	not = ClassNotRetryable
)

// Gemini's 429 as the gemini client words it, and its bodies (Google's
// envelope with google.rpc details, as the Gemini API sends them; see
// docs/provider-formats.md).
const (
	geminiMsg429        = "429 RESOURCE_EXHAUSTED: You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
	geminiBodyPerMinute = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"250000"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"45.837906927s"}]}}`
	geminiBodyPerDay    = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-pro"},"quotaValue":"50"}]}]}}`
)

// classifyCases are real provider and transport error messages (from the
// providers' documentation and internal/provider/providertest), labelled
// with agentd's class.
var classifyCases = []classifyCase{
	// ---- Anthropic ----
	{"anthropic 529 body", failure(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), tr},
	{"anthropic 529 structured", failure("Overloaded", status(529), typ("overloaded_error"), api("anthropic")), tr},
	{"anthropic 529 status+body", failure(`529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), tr},
	{"anthropic go sdk 529", failure(`POST "https://api.anthropic.com/v1/messages": 529 Overloaded {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`), tr},
	{"anthropic python sdk 529", failure(`Error code: 529 - {'type': 'error', 'error': {'type': 'overloaded_error', 'message': 'Overloaded'}}`), tr},
	{"anthropic 500 api_error", failure(`{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, status(500)), tr},
	{"anthropic api_error type only", failure("Internal server error", typ("api_error")), tr},
	{"anthropic in-stream overloaded after 200", failure(`{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`, status(200), typ("overloaded_error")), tr},
	{"anthropic per-minute 429", failure("Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.", status(429), typ("rate_limit_error"), hdr("retry-after", "20")), tr},
	{"anthropic organization ITPM", failure("This request would exceed the rate limit for your organization (7a1b2c3d-0000-4000-8000-000000000000) of 40,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage.", status(429), typ("rate_limit_error")), tr},
	// The same 429 with the input bucket full: the request alone is larger
	// than the limit; with the bucket partly spent it is a throttle.
	{"anthropic ITPM over the limit", failure("This request would exceed the rate limit for your organization (7a1b2c3d-0000-4000-8000-000000000000) of 30,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.", status(429), typ("rate_limit_error"),
		hdr("anthropic-ratelimit-input-tokens-limit", "30000"), hdr("anthropic-ratelimit-input-tokens-remaining", "30000"), hdr("retry-after", "1")), not},
	{"anthropic ITPM bucket partly spent", failure("This request would exceed the rate limit for your organization (7a1b2c3d-0000-4000-8000-000000000000) of 30,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.", status(429), typ("rate_limit_error"),
		hdr("anthropic-ratelimit-input-tokens-limit", "30000"), hdr("anthropic-ratelimit-input-tokens-remaining", "12000"), hdr("retry-after", "20")), tr},
	{"anthropic OTPM over the limit", failure("This request would exceed the rate limit for your organization (7a1b2c3d) of 8,000 output tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.", status(429), typ("rate_limit_error"),
		hdr("anthropic-ratelimit-output-tokens-limit", "8000"), hdr("anthropic-ratelimit-output-tokens-remaining", "8000"), hdr("anthropic-ratelimit-input-tokens-remaining", "100")), not},
	{"anthropic ITPM full output bucket only", failure("This request would exceed the rate limit for your organization (7a1b2c3d) of 30,000 input tokens per minute.", status(429), typ("rate_limit_error"),
		hdr("anthropic-ratelimit-output-tokens-limit", "8000"), hdr("anthropic-ratelimit-output-tokens-remaining", "8000"), hdr("anthropic-ratelimit-input-tokens-limit", "30000"), hdr("anthropic-ratelimit-input-tokens-remaining", "0")), tr},
	{"anthropic python RateLimitError", failure(`anthropic.RateLimitError: Error code: 429 - {'type': 'error', 'error': {'type': 'rate_limit_error', 'message': 'Number of request tokens has exceeded your per-minute rate limit'}}`), tr},
	{"anthropic account rate limit", failure("This request would exceed your account's rate limit. Please try again later.", status(429), typ("rate_limit_error")), use},
	{"anthropic account rate limit text only", failure("429 rate_limit_error: Number of requests has exceeded your account's rate limit."), use},
	{"anthropic spend limit code", failure("You have reached your specified API usage limits. You will regain access on 2025-09-01 at 00:00 UTC.", status(429), typ("rate_limit_error"), code("enforced_spend_limit_reached")), use},
	{"anthropic workspace usage limits 400", failure("You have reached your specified workspace API usage limits. You will regain access on 2025-09-01 at 00:00 UTC.", status(400), typ("invalid_request_error")), use},
	{"anthropic credit balance", failure("Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.", status(400), typ("invalid_request_error")), use},
	{"anthropic billing_error 402", failure("billing error", status(402), typ("billing_error")), use},
	{"anthropic unified window 429 huge retry-after", failure("This request would exceed your rate limit.", status(429), typ("rate_limit_error"), hdr("retry-after", "7999")), use},
	{"anthropic unified status rejected", failure(`{"type":"error","error":{"type":"rate_limit_error","message":"Error"}}`, status(429), hdr("anthropic-ratelimit-unified-status", "rejected"), hdr("anthropic-ratelimit-unified-reset", "1755787200")), use},
	{"anthropic prompt too long", failure(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 205351 tokens > 200000 maximum"},"request_id":"req_011CV5J4YZo4J3KLTDZgDN7S"}`, status(400)), ovf},
	{"anthropic prompt too long plain", failure("prompt is too long: 213462 tokens > 200000 maximum"), ovf},
	{"anthropic input+max_tokens over window", failure("input length and `max_tokens` exceed context limit: 189136 + 20000 > 204648, decrease input length or `max_tokens` and try again", status(400)), ovf},
	{"anthropic 413 cloudflare", failure(`{"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}`, status(413)), ovf},
	{"anthropic 413 type only", failure("Request exceeds the maximum size", typ("request_too_large")), ovf},
	{"anthropic 401", failure(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, status(401)), not},
	{"anthropic 403 oauth", failure(`{"type":"error","error":{"type":"permission_error","message":"OAuth authentication is currently not allowed for this organization.","details":{"error_code":"oauth_not_allowed_for_organization"}}}`, status(403)), not},
	{"anthropic 403 scope", failure(`{"error":{"type":"permission_error","message":"OAuth token does not meet scope requirement user:profile"}}`, status(403)), not},
	{"anthropic 404 model", failure(`{"type":"error","error":{"type":"not_found_error","message":"model: claude-3-opus-xyz"}}`, status(404)), not},
	{"anthropic 400 roles", failure(`{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate between \"user\" and \"assistant\""},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, status(400)), not},
	{"anthropic 409 conflict", failure("Conflict", status(409), typ("conflict_error")), tr},
	{"anthropic envelope before message_start", failure("Anthropic stream envelope error: stream ended before message_start"), tr},
	{"anthropic envelope before terminal stop", failure("Anthropic stream envelope error: stream ended before terminal stop signal"), not},
	{"anthropic sdk connection error", failure("Connection error."), tr},
	{"anthropic sdk timeout", failure("Request timed out."), tr},
	{"anthropic sdk APIConnectionError", failure("APIConnectionError: Connection error."), tr},
	{"anthropic refusal", failure("Refusal (cyber): Classifier declined this turn.", details("refusal")), ref},
	{"anthropic refusal with output", failure("Refusal (cyber): Classifier declined this turn.", details("refusal"), observable()), ref},
	{"sensitive refusal", failure("Classifier declined this turn.", details("sensitive")), ref},
	{"refusal mixed case", failure("Refusal: declined.", details("Refusal")), ref},

	// ---- OpenAI ----
	{"openai TPM try again 9.816s", failure("Rate limit reached for gpt-4 in organization org-uVqpjtJiKqvVJMVfvpaounIh on tokens per min (TPM): Limit 10000, Used 8554, Requested 3082. Please try again in 9.816s. Visit https://platform.openai.com/account/rate-limits to learn more.", status(429), code("rate_limit_exceeded"), typ("tokens")), tr},
	{"openai TPM 644ms text only", failure("Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms. Visit https://platform.openai.com/account/rate-limits to learn more."), tr},
	{"openai old TPM 6ms", failure("Rate limit reached for default-gpt-3.5-turbo in organization org-xxx on tokens per min. Limit: 10000 / min. Please try again in 6ms. Contact us through our help center at help.openai.com if you continue to have issues."), tr},
	{"openai RPD is a usage limit", failure("Rate limit reached for gpt-4o-mini in organization org-x on requests per day (RPD): Limit 10000, Used 10000, Requested 1. Please try again in 8.64s. Visit https://platform.openai.com/account/rate-limits to learn more.", status(429), code("rate_limit_exceeded")), use},
	{"openai request too large TPM", failure(`{"error": {"message": "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 31538. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}`, status(429), code("rate_limit_exceeded")), not},
	{"openai request too large 45411", failure("Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 45411. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.", status(429), code("rate_limit_exceeded"), typ("tokens"), hdr("retry-after", "1")), not},
	{"openai request too large python sdk", failure(`Error code: 429 - {'error': {'message': 'Request too large for gpt-5 in organization org-123456 on tokens per min (TPM): Limit 30000, Requested 36055. The input or output tokens must be reduced in order to run successfully.', 'type': 'tokens', 'param': None, 'code': 'rate_limit_exceeded'}}`), not},
	{"openai request too large per day", failure("Request too large for gpt-4o-mini in organization org-abc on tokens per day (TPD): Limit 200000, Requested 250000. The input or output tokens must be reduced in order to run successfully.", status(429)), not},
	{"openai insufficient_quota", failure("You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.", status(429), typ("insufficient_quota"), code("insufficient_quota")), use},
	{"openai insufficient_quota text only", failure("429 You exceeded your current quota, please check your plan and billing details."), use},
	{"openai project spend limit", failure("You exceeded your current quota, please check your plan and billing details.", status(429), typ("insufficient_quota"), code("project_spend_limit_exceeded")), use},
	{"openai credit balance exhausted", failure("Your credit balance is exhausted.", status(429), code("credit_balance_exhausted")), use},
	{"openai org usage limit", failure("Your organization has reached its usage limit.", status(429), code("organization_usage_limit_exceeded")), use},
	{"openai billing not active", failure("Your account is not active, please check your billing details on our website.", status(429), code("billing_not_active")), use},
	{"openai 500 server_error", failure("The server had an error while processing your request. Sorry about that!", status(500), typ("server_error")), tr},
	{"openai 500 text only", failure("The server had an error while processing your request. Sorry about that!"), tr},
	{"openai realtime retry your request", failure("The server had an error while processing your request. Sorry about that! You can retry your request, or contact us through our help center at help.openai.com if the error persists. (Please include the session ID sess_*** in your message.)"), tr},
	{"openai response.failed server_error", failure("An error occurred while processing your request. You can retry your request, or contact us through our help center at help.openai.com if the error persists. Please include the request ID req_8f3b in your message.", status(200), code("server_error")), tr},
	{"openai engine overloaded", failure("The engine is currently overloaded, please try again later", status(503)), tr},
	{"openai model overloaded", failure("That model is currently overloaded with other requests. You can retry your request, or contact us through our help center at help.openai.com if the error persists."), tr},
	{"openai bad gateway", failure("Bad gateway.", status(502)), tr},
	{"openai go sdk 503", failure(`POST "https://api.openai.com/v1/responses": 503 Service Unavailable {"message":"Service Unavailable"}`), tr},
	{"openai node 429 no body", failure("429 status code (no body)"), use},
	{"openai 429 Too Many Requests", failure("429 Too Many Requests"), tr},
	{"openai node 400 no body", failure("400 status code (no body)"), ovf},
	{"openai node 413 no body", failure("413 status code (no body)"), ovf},
	{"openai context_length_exceeded chat", failure("This model's maximum context length is 4097 tokens. However, your messages resulted in 4294 tokens. Please reduce the length of the messages.", status(400), typ("invalid_request_error"), code("context_length_exceeded")), ovf},
	{"openai context length with completion", failure("This model's maximum context length is 4097 tokens. However, you requested 4295 tokens (3245 in the messages, 1050 in the completion). Please reduce the length of the messages or completion."), ovf},
	{"openai responses context window", failure("Your input exceeds the context window of this model. Please adjust your input and try again.", api("openai-responses")), ovf},
	{"openai responses overflow code only", failure("", code("context_length_exceeded")), ovf},
	{"openai 401 key", failure("Incorrect API key provided: sk-abc***. You can find your API key at https://platform.openai.com/account/api-keys.", status(401), code("invalid_api_key")), not},
	{"openai 404 model", failure("The model `gpt-5-foo` does not exist or you do not have access to it.", status(404), code("model_not_found")), not},
	{"openai 400 max_output_tokens", failure("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 1 instead.", status(400)), not},
	{"openai content policy", failure("Your request was rejected as a result of our safety system.", status(400), code("content_policy_violation")), not},
	{"openai stream_read_error", failure("Error Code stream_read_error"), tr},
	{"openai unsupported parameter", failure("Unsupported parameter: 'temperature' is not supported with this model.", status(400)), not},

	// ---- OpenAI Responses: stale replay ----
	{"stale previous_response_not_found", failure("Previous response with id 'resp_abc' not found.", api("openai-responses"), status(400), code("previous_response_not_found")), stl},
	{"stale code on unknown api", failure("Previous response with id 'resp_0f09a275409xxx' not found.", code("previous_response_not_found")), stl},
	{"stale text only", failure("Previous response not found.", api("openai-responses")), stl},
	{"stale previous_response_id not found", failure("previous_response_id not found", api("openai-responses")), stl},
	{"stale ZDR", failure("400 Previous response cannot be used for this organization due to Zero Data Retention.", api("openai-responses")), stl},
	{"stale item rs", failure("Error: 404 Item with id 'rs_04962823ecde01b901698e138042688193a657e07614b238c3' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", api("openai-responses")), stl},
	{"stale item msg", failure(`{"error": {"message": "Item with id 'msg_missing' not found. Items are not persisted when `+"`store`"+` is set to false.", "type": "invalid_request_error", "param": "input", "code": null}}`, api("openai-responses")), stl},
	{"stale item codex", failure("Item with id 'rs_stale' not found.", api("openai-codex-responses")), stl},
	{"stale previous response expired", failure("The previous response has expired.", api("openai-responses")), stl},
	{"stale text on chat api is not stale", failure("Previous response with id 'resp_1' not found.", api("openai-chat")), not},
	{"unsupported previous_response_id", failure("Unsupported parameter: previous_response_id", api("openai-responses")), not},
	{"stale after observable output", failure("Item with id 'rs_x' not found.", api("openai-responses"), observable()), not},

	// ---- stale reasoning state (a stale replay): Anthropic signatures and the thinking-first rule, OpenAI encrypted content ----
	{"anthropic invalid thinking signature", failure("400 invalid_request_error: messages.1.content.0: Invalid `signature` in `thinking` block", status(400), typ("invalid_request_error"), api("anthropic")), stl},
	{"anthropic invalid signature body", failure(`{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid `+"`signature`"+` in `+"`thinking`"+` block"},"request_id":"req_011CWkB65DcNzK2MiofhXx8b"}`, status(400)), stl},
	{"anthropic invalid signature via vertex", failure(`{"error":{"code":400,"message":"{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"messages.5.content.0: Invalid ` + "`signature`" + ` in ` + "`thinking`" + ` block\"},\"request_id\":\"req_vrtx_011CWcDAiLqXNmbGx1MH2UDE\"}","status":"INVALID_ARGUMENT"}}`), stl},
	{"anthropic invalid signature unquoted", failure("API Error: 400 messages.1.content.0: Invalid signature in thinking block"), stl},
	{"anthropic invalid signature bound elsewhere", failure("messages.1.content.0: Invalid `signature` in `thinking` block. The block is bound to a different conversation. Remove the block.", status(400), typ("invalid_request_error")), stl},
	{"anthropic latest thinking modified", failure("400 invalid_request_error: messages.3.content.8: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response.", status(400), typ("invalid_request_error")), stl},
	{"anthropic thinking not first in its message", failure(`{"type":"error","error":{"type":"invalid_request_error","message":"messages.5.content.0: If an assistant message contains any thinking blocks, the first block must be `+"`thinking`"+` or `+"`redacted_thinking`"+`. Found `+"`text`"+`."},"request_id":"req_011CXTTUY143pJroriaiunm9"}`, status(400)), stl},
	{"anthropic final thinking while disabled", failure("400 invalid_request_error: When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request.", status(400), typ("invalid_request_error")), stl},
	{"anthropic thinking must come first", failure("400 invalid_request_error: messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking", status(400), typ("invalid_request_error"), api("anthropic")), stl},
	{"anthropic thinking first, tool_use found", failure("messages.3.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`."), stl},
	{"openai invalid_encrypted_content", failure("400 invalid_request_error: The encrypted content for item rs_68af3b2c1e0c8193 could not be verified.", status(400), typ("invalid_request_error"), code("invalid_encrypted_content"), api("openai-responses")), stl},
	{"openai encrypted content body", failure(`{"error":{"message":"The encrypted content gAAA...DQ== could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}`, status(400)), stl},
	{"openai encrypted content other organization", failure("The encrypted content gAAA...IQ== could not be verified. Reason: Encrypted content organization_id did not match the target organization.", api("openai-responses")), stl},
	{"openai encrypted content not decrypted", failure("The encrypted content for item rs_0a18166210d72b5e0069fd938e69a08193a992a58d690a224b could not be verified. Reason: Encrypted content could not be decrypted or parsed."), stl},
	{"openai encrypted content code only", failure("unexpected response", code("invalid_encrypted_content")), stl},
	{"stale reasoning after observable output", failure("messages.1.content.0: Invalid `signature` in `thinking` block", observable()), not},
	{"stale reasoning wording on chat api", failure("messages.1.content.0: Invalid `signature` in `thinking` block", status(400), api("openai-chat")), not},
	{"thinking field required is not stale", failure("messages.1.content.0.thinking: Field required", status(400), typ("invalid_request_error")), not},
	{"aws signature mismatch is not stale", failure("The request signature we calculated does not match the signature you provided.", status(403)), not},
	{"webhook invalid signature is not stale", failure("invalid signature", status(401)), not},

	// ---- OpenAI Codex ----
	{"codex usage limit try again", failure("You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in ~158 min."), use},
	{"codex usage_limit_reached code", failure("The usage limit has been reached", status(429), code("usage_limit_reached")), use},
	{"codex usage_not_included", failure("usage_not_included: your plan does not include Codex"), use},

	// ---- Azure OpenAI ----
	{"azure token rate limit", failure("Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.", code("429")), tr},
	{"azure rate limit is exceeded", failure("Rate limit is exceeded. Try again in 20 seconds.", status(429), code("RateLimitReached")), tr},
	{"azure internal server error", failure(`{"error":{"code":"InternalServerError","message":"The service is temporarily unable to process your request. Please try again later."}}`, status(500)), tr},
	{"azure service unavailable", failure("The service is temporarily unavailable.", code("ServiceUnavailable")), tr},
	{"azure timeout 408", failure("Request timed out", status(408), code("Timeout")), tr},
	{"azure content filter", failure("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.", status(400), code("content_filter")), not},
	{"azure deployment not found", failure("The API deployment for this resource does not exist.", status(404), code("DeploymentNotFound")), not},
	{"azure context length", failure("This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.", status(400), code("context_length_exceeded")), ovf},

	// ---- Google Gemini / Vertex ----
	{"gemini resource exhausted", failure(`{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`, status(429)), use},
	{"gemini free tier quota", failure("You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. * Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 15, model: gemini-2.0-flash Please retry in 7.609416s.", status(429)), use},
	// Vertex's shared capacity (dynamic shared quota): no quota of the
	// caller's ran out, back off and retry.
	{"vertex resource exhausted", failure(`Google API error (429): {"error":{"code":429,"message":"Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.","status":"RESOURCE_EXHAUSTED"}}`), tr},
	{"vertex resource exhausted, as the gemini client reports it", failure("429 RESOURCE_EXHAUSTED: Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.", status(429), typ("RESOURCE_EXHAUSTED"), code("429")), tr},
	{"vertex per-minute quota in the text", failure("429 Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: gemini-pro. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai."), tr},
	{"gemini per-minute quota with RetryInfo", failure(geminiMsg429, status(429), typ("RESOURCE_EXHAUSTED"), code("429"), body(geminiBodyPerMinute)), tr},
	{"gemini RetryInfo only", failure(geminiMsg429, status(429), typ("RESOURCE_EXHAUSTED"), body(`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`)), tr},
	{"gemini per-day quota", failure(geminiMsg429, status(429), typ("RESOURCE_EXHAUSTED"), code("429"), body(geminiBodyPerDay)), use},
	{"gemini per-day quota with a RetryInfo", failure(geminiMsg429, status(429), typ("RESOURCE_EXHAUSTED"), body(strings.Replace(geminiBodyPerMinute, "GenerateContentInputTokensPerModelPerMinute-FreeTier", "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 1))), use},
	{"gemini per-day quota in an array body", failure(geminiMsg429, status(429), body("["+geminiBodyPerDay+"]")), use},
	{"gemini 503 as the gemini client reports it", failure("503 UNAVAILABLE: The model is overloaded. Please try again later.", status(503), typ("UNAVAILABLE"), code("503"), api("gemini")), tr},
	{"gemini 503 mid-stream", failure("200 UNAVAILABLE: The model is overloaded. Please try again later.", status(200), typ("UNAVAILABLE"), code("503"), api("gemini")), tr},
	{"gemini input token count as reported", failure("400 INVALID_ARGUMENT: The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).", status(400), typ("INVALID_ARGUMENT"), code("400"), api("gemini")), ovf},
	{"gemini input token count exceeds", failure("400 INVALID_ARGUMENT: The input token count exceeds the maximum number of tokens allowed 1048576.", status(400), typ("INVALID_ARGUMENT"), api("gemini")), ovf},
	{"gemini bad key", failure("400 INVALID_ARGUMENT: API key not valid. Please pass a valid API key.", status(400), typ("INVALID_ARGUMENT"), api("gemini")), not},
	{"gemini thought signature refused", failure("400 INVALID_ARGUMENT: Unable to submit request because Thought signature is not valid.", status(400), typ("INVALID_ARGUMENT"), api("gemini")), stl},
	{"gemini blocked prompt", failure("Prompt blocked by Gemini (promptFeedback.blockReason PROHIBITED_CONTENT)", details("sensitive"), api("gemini")), ref},
	{"gemini 503 overloaded", failure(`{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`, status(503)), tr},
	{"gemini 503 unavailable text", failure(`{"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}`), tr},
	{"gemini 500 internal", failure(`{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}`), tr},
	{"gemini 504 deadline", failure(`{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}`), tr},
	{"gemini status type only", failure("Deadline expired before operation could complete.", typ("DEADLINE_EXCEEDED")), tr},
	{"gemini input token count", failure("The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)."), ovf},
	{"vertex input token count", failure("Unable to submit request because the input token count is 40000 but model only supports up to 32768. Reduce the input token count and try again."), ovf},
	{"gemini api key invalid", failure(`{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}`, status(400)), not},
	{"gemini malformed function call", failure("Model stopped: MALFORMED_FUNCTION_CALL"), tr},
	{"gemini suspended", failure("Permission denied: Consumer 'api_key:xxx' has been suspended.", status(403)), not},

	// ---- Amazon Bedrock ----
	{"bedrock throttling requests", failure("ThrottlingException: Too many requests, please wait before trying again."), tr},
	{"bedrock throttling tokens is not overflow", failure("ThrottlingException: Too many tokens, please wait before trying again."), tr},
	{"bedrock too many tokens 429", failure("Too many tokens, please wait before trying again.", status(429)), tr},
	{"bedrock input too long", failure("ValidationException: Input is too long for requested model."), ovf},
	{"bedrock converse prompt too long", failure("ValidationException: The model returned the following errors: prompt is too long: 210000 tokens > 200000 maximum"), ovf},
	{"bedrock titan input tokens", failure("ValidationException: Too many input tokens. Max input tokens: 8192, request input token count: 9000"), ovf},
	{"bedrock service unavailable", failure("ServiceUnavailableException: Bedrock is unable to process your request."), tr},
	{"bedrock internal server", failure("InternalServerException: The system encountered an unexpected error during processing. Try your request again."), tr},
	{"bedrock model not ready", failure("ModelNotReadyException: Model is not ready to serve inference requests. The AWS SDK will automatically retry the operation up to 5 times."), tr},
	{"bedrock model timeout", failure("ModelTimeoutException: The request took too long to process. Processing time exceeded the model timeout length."), tr},
	{"bedrock model stream error", failure("ModelStreamErrorException: The model stream encountered an error."), tr},
	{"bedrock service quota", failure("ServiceQuotaExceededException: Your request exceeds the service quota for your account."), use},
	{"bedrock access denied", failure("AccessDeniedException: You don't have access to the model with the specified model ID."), not},
	{"bedrock validation", failure("ValidationException: Malformed input request: #: required key [messages] not found, please reformat your input and try again."), not},

	// ---- Mistral, Cohere, Groq, DeepSeek, xAI, OpenRouter, Copilot, others ----
	{"mistral overflow", failure("Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"), ovf},
	{"mistral rate limited", failure(`{"object":"error","message":"Requests rate limit exceeded","type":"rate_limited","param":null,"code":"1300"}`, status(429)), tr},
	{"mistral capacity", failure("Service tier capacity exceeded for this model.", status(429)), tr},
	{"cohere overflow", failure("too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 5000. Try using a shorter prompt, or enabling prompt truncating."), ovf},
	{"cohere size limit", failure("too many tokens: size limit exceeded by 1234 tokens. Try using shorter or fewer inputs, or setting prompt_truncation='AUTO'."), ovf},
	{"cohere trial key 429", failure("You are using a Trial key, which is limited to 10 API calls / minute. You can continue to use the Trial key for free or upgrade to a Production key with higher rate limits.", status(429)), tr},
	{"groq reduce length", failure("Please reduce the length of the messages or completion.", status(400), code("context_length_exceeded")), ovf},
	{"groq TPM request too large", failure("Request too large for model `llama3-70b-8192` in organization `org_01hx` on tokens per minute (TPM): Limit 6000, Requested 7000, please reduce your message size and try again.", status(413)), not},
	{"groq request too large service tier 413", failure("Request too large for model `llama-3.3-70b-versatile` in organization `org_01kgg5588eftc8k70aes4864eb` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Requested 14137, please reduce your message size and try again. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing", status(413), code("rate_limit_exceeded"), typ("tokens")), not},
	{"groq request too large 429 body", failure(`{"error":{"message":"Request too large for model `+"`llama-3.1-8b-instant`"+` in organization `+"`org_01hx`"+` service tier `+"`on_demand`"+` on tokens per minute (TPM): Limit 6000, Requested 12,328, please reduce your message size and try again.","type":"tokens","code":"rate_limit_exceeded"}}`, status(429)), not},
	{"groq TPM rate limit", failure("Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01hx` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Used 5000, Requested 1500. Please try again in 5s.", status(429), code("rate_limit_exceeded")), tr},
	{"groq TPD is usage", failure("Rate limit reached for model `llama3-70b-8192` in organization `org_01hx` on tokens per day (TPD): Limit 500000, Used 499000, Requested 2000. Please try again in 4m48s.", status(429), code("rate_limit_exceeded")), use},
	{"deepseek overflow", failure("This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (69000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.", code("invalid_request_error")), ovf},
	{"deepseek insufficient balance", failure("Insufficient Balance", status(402)), use},
	{"deepseek server overloaded", failure("Server overloaded, please try again later", status(503)), tr},
	{"xai overflow", failure("This model's maximum prompt length is 131072 but the request contains 537812 tokens."), ovf},
	{"openrouter overflow", failure(`This endpoint's maximum context length is 200000 tokens. However, you requested about 250000 tokens (240000 of text input, 10000 in the output). Please reduce the length of either one, or use the "middle-out" transform to compress your prompt automatically.`), ovf},
	{"openrouter free per day", failure("Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day", status(429)), use},
	// OpenRouter's 402: no credits. Not retried, not a block (issue 21).
	{"openrouter more credits", failure("This request requires more credits, or fewer max_tokens. You requested up to 4096 tokens, but can only afford 1000. To increase, visit https://openrouter.ai/settings/credits and upgrade to a paid account", status(402)), not},
	{"openrouter insufficient credits", failure("402 Insufficient credits. This account never purchased credits. Make sure your key is on the correct account or org, and if so, purchase more at https://openrouter.ai/settings/credits", status(402), api("openai-chat")), not},
	{"openrouter 429 upstream raw, in a 200", failure(`200 Provider returned error (Google AI Studio: {"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}})`, status(200), code("429"), api("openai-chat")), use},
	{"openrouter rate limited upstream", failure("429 google/gemini-2.0-flash-exp:free is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations", status(429), code("429"), api("openai-chat")), tr},
	{"vllm loading model", failure("503 Loading model", status(503), api("openai-chat")), tr},
	{"ollama busy in a 200", failure("200 server busy, please try again.  maximum pending requests exceeded", status(200), api("openai-chat")), tr},
	{"hf endpoint loading", failure(`Model meta-llama/Llama-3.1-8B-Instruct is currently loading`, api("openai-chat")), tr},
	{"openrouter provider returned error", failure("Provider returned error"), tr},
	{"openrouter 502 envelope", failure(`{"error":{"message":"Provider returned error","code":502,"metadata":{"raw":"upstream failure"}}}`), tr},
	{"openrouter finish_reason error", failure("Provider returned error finish_reason"), tr},
	{"copilot overflow", failure("prompt token count of 150000 exceeds the limit of 128000"), ovf},
	{"copilot model_not_supported flap", failure("Copilot request failed (HTTP 400 model_not_supported): The requested model is not supported."), tr},
	{"copilot raw not supported", failure("400 The requested model is not supported."), not},
	{"minimax overflow", failure("invalid params, context window exceeds limit"), ovf},
	{"kimi overflow", failure("Your request exceeded model token limit: 262144 (requested: 300000)"), ovf},
	{"zai finish reason overflow", failure("model_context_window_exceeded"), ovf},
	{"zai 1302", failure("error 1302 from upstream"), not},
	{"cerebras 413 no body", failure("Error: 413 (no body)"), ovf},
	{"fireworks overflow", failure("The prompt is too long: 300000, model maximum context length: 262144"), ovf},
	{"individual quota reached", failure("Individual quota reached. Please wait for your quota to reset."), use},
	{"antigravity capacity quota", failure("You have exhausted your capacity on this model. Your quota will reset after 18h31m10s."), use},
	{"opencode insufficient balance", failure("401 Insufficient balance. Please top up your account."), use},

	// ---- vLLM, TGI, llama.cpp, LM Studio, Ollama ----
	{"vllm overflow", failure("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.", status(400), typ("BadRequestError")), ovf},
	{"vllm decoder prompt", failure("The decoder prompt (length 5000) is longer than the maximum model length of 4096. Make sure that `max_model_len` is no smaller than the number of text tokens."), ovf},
	{"vllm max_tokens too large", failure("'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 4096 tokens and your request has 3500 input tokens (1000 > 4096 - 3500)."), ovf},
	{"tgi inputs", failure("Input validation error: `inputs` must have less than 4096 tokens. Given: 5000"), ovf},
	{"together inputs+max_new_tokens", failure("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8193. Given: 8000 `inputs` tokens and 512 `max_new_tokens`"), ovf},
	{"llama.cpp context size", failure("the request exceeds the available context size, try increasing it"), ovf},
	{"llama.cpp requested tokens", failure("requested tokens (5000) exceed context window of 4096"), ovf},
	{"llama.cpp n_ctx", failure("input is too large to process: 5000 tokens > n_ctx 4096"), ovf},
	{"lm studio overflow", failure("Trying to keep the first 5000 tokens when context the overflows. tokens to keep from the initial prompt is greater than the context length"), ovf},
	{"ollama overflow", failure("input length exceeds maximum context length"), ovf},
	{"ollama prompt filled", failure("prompt filled the context window"), ovf},
	{"generic context length exceeded", failure("context_length_exceeded"), ovf},
	{"generic token limit exceeded", failure("Token limit exceeded: the conversation is too long"), ovf},
	{"vllm 503 not ready", failure("Service Unavailable", status(503)), tr},

	// ---- transports: Go net/http, crypto/tls, http2 ----
	{"go connection reset", failure("read tcp 127.0.0.1:1234->104.18.6.192:443: read: connection reset by peer"), tr},
	{"go unexpected EOF", failure(`Post "https://api.anthropic.com/v1/messages": unexpected EOF`), tr},
	{"go bare unexpected EOF", failure("unexpected EOF"), tr},
	{"go client timeout awaiting headers", failure(`Post "https://api.openai.com/v1/responses": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`), tr},
	{"go context deadline exceeded", failure("context deadline exceeded"), tr},
	{"go http2 goaway", failure(`http2: server sent GOAWAY and closed the connection; LastStreamID=1999, ErrCode=NO_ERROR, debug=""`), tr},
	{"go tls handshake timeout", failure(`Post "https://api.openai.com/v1/chat/completions": net/http: TLS handshake timeout`), tr},
	{"go tls unknown authority", failure(`Post "https://api.openai.com/v1/chat/completions": tls: failed to verify certificate: x509: certificate signed by unknown authority`), not},
	{"go tls handshake failure", failure("remote error: tls: handshake failure"), not},
	{"go tls bad record mac", failure("local error: tls: bad record MAC"), tr},
	{"go connection refused", failure(`Post "http://127.0.0.1:8000/v1/chat/completions": dial tcp 127.0.0.1:8000: connect: connection refused`), tr},
	{"go dns server misbehaving", failure("dial tcp: lookup api.openai.com on 127.0.0.53:53: server misbehaving"), tr},
	{"go dns no such host", failure("dial tcp: lookup api.openai.invalid: no such host"), not},
	{"go broken pipe", failure("write tcp 10.1.2.3:5555->1.2.3.4:443: write: broken pipe"), tr},
	{"go http2 internal error", failure("stream error: stream ID 3; INTERNAL_ERROR; received from peer"), tr},
	{"go http2 refused stream", failure("stream error: stream ID 1; REFUSED_STREAM"), tr},
	{"go http2 connection lost", failure("http2: client connection lost"), tr},
	{"go io timeout", failure("read tcp 10.0.0.2:50000->1.1.1.1:443: i/o timeout"), tr},
	{"go bare EOF", failure(`Post "https://api.anthropic.com/v1/messages": EOF`), tr},
	{"go timeout reading body", failure("net/http: request canceled (Client.Timeout exceeded while reading body)"), tr},
	{"go server closed idle", failure("http: server closed idle connection"), tr},
	{"go closed network connection", failure("read tcp 10.0.0.2:1->1.1.1.1:443: use of closed network connection"), tr},
	{"go timeout awaiting headers", failure("net/http: timeout awaiting response headers"), tr},
	{"go network unreachable", failure("dial tcp 1.2.3.4:443: connect: network is unreachable"), tr},
	{"go context canceled", failure("context canceled"), not},

	// ---- transports: Node, Bun, Envoy, Cloudflare ----
	{"node fetch failed", failure("TypeError: fetch failed"), tr},
	{"node socket hang up", failure("Error: socket hang up"), tr},
	{"node ECONNRESET", failure("Error: read ECONNRESET"), tr},
	{"node network ECONNRESET", failure("network ECONNRESET"), tr},
	{"node ETIMEDOUT", failure("connect ETIMEDOUT 1.2.3.4:443"), tr},
	{"node terminated", failure("TypeError: terminated"), tr},
	{"node other side closed", failure("SocketError: other side closed"), tr},
	{"undici socket", failure("UND_ERR_SOCKET"), tr},
	{"bun socket closed", failure("The socket connection was closed unexpectedly. For more information, pass `verbose: true` in the second argument to fetch()"), tr},
	{"envoy reset before headers", failure("upstream connect error or disconnect/reset before headers. reset reason: connection failure"), tr},
	{"envoy no healthy upstream", failure("no healthy upstream"), tr},
	{"envoy upstream request timeout", failure("upstream request timeout"), tr},
	{"cloudflare 524", failure("error code: 524"), tr},
	{"http2 stream reset class", failure("HTTP2StreamReset: stream reset by server"), tr},
	{"stream stall", failure("stream stall: no data for 120s"), tr},
	{"no error details", failure("no error details in response"), tr},
	{"retry delay wording", failure("Retry delay exceeded for upstream"), tr},
	{"unexpected socket close", failure("unexpected socket close"), tr},
	{"websocket error", failure("WebSocket error: connection dropped"), tr},
	{"connection error generic", failure("connection error: upstream unavailable"), tr},
	{"network error", failure("NetworkError when attempting to fetch resource."), tr},
	{"gateway timeout", failure("504 Gateway Timeout"), tr},
	{"simulated 529", failure("simulated fault: 529 overloaded", api("simulated")), tr},

	// ---- reference notes a.10 and word boundaries ----
	{"unexpected end of JSON", failure("Unexpected end of JSON input"), not},
	{"unterminated is not terminated", failure("JSON Parse error: Unterminated string"), not},
	{"unterminated literal", failure("SyntaxError: Unterminated string literal at position 12"), not},
	{"connection terminated", failure("connection terminated unexpectedly"), tr},
	{"generate is not rate", failure("Could not generate limit summary for this request"), not},
	{"250000 is not 500", failure("Invalid value: max_tokens must be at most 250000"), not},
	{"request id with 500", failure("Invalid request req_5002abc: unknown field"), not},
	{"request id req-500abc", failure("request id req-500abc: invalid parameter"), not},
	{"500 tokens is a quantity", failure("Invalid 'max_tokens': 500 tokens requested but this model supports 256"), not},
	{"1,500 is a quantity", failure("value 1,500 is out of range for top_k"), not},
	{"decimal 2.500", failure("temperature 2.500 is invalid"), not},
	{"position 429", failure("Unexpected token } in JSON at position 429"), not},
	{"known 400 outranks 503 in text", failure("max_tokens: 503 is not allowed for this model", status(400)), not},
	{"requests per minute limit", failure("Requests per minute limit reached"), tr},
	{"please retry in 5s", failure("Please retry in 5s"), tr},
	{"please retry with status 429", failure("Please retry in 5s", status(429)), tr},
	{"generic abort as error", failure("Request was aborted"), not},
	{"generic abort as aborted stop", failure("Request was aborted", stop("aborted")), not},

	// ---- stop reasons, empty messages, observable output, silent overflow ----
	{"stop reason stop", failure("Overloaded", stop("stop")), not},
	{"stop reason empty", failure("Overloaded", stop("")), not},
	{"empty message with 529", failure("", status(529)), not},
	{"blank message", failure("   "), not},
	{"observable output 529", failure("Overloaded", status(529), observable()), not},
	{"stream interrupted detail", failure("socket hang up", details("STREAM_INTERRUPTED_AFTER_CONTENT")), not},
	{"usage after observable output", failure("You exceeded your current quota", code("insufficient_quota"), observable()), not},
	{"overflow after observable output", failure("prompt is too long: 1 tokens > 0 maximum", observable()), ovf},
	{"silent overflow", failure("", stop("stop"), window(1000, 2000)), ovf},
	{"within window", failure("Overloaded", window(1000, 900)), tr},
	{"refusal with empty message", failure("", details("refusal")), not},
	{"413 empty message", failure("", status(413)), ovf},
	{"501 not implemented", failure("Not Implemented", status(501)), not},
	{"401 with rate limit text is retried", failure("401 rate limit exceeded"), tr},
}

func TestClassifyTable(t *testing.T) {
	t.Parallel()
	if len(classifyCases) < 150 {
		t.Fatalf("classification table has %d cases, want >= 150", len(classifyCases))
	}
	seen := map[string]bool{}
	for _, tc := range classifyCases {
		if seen[tc.name] {
			t.Errorf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Classify(tc.f, testNow)
			if got.Class != tc.want {
				t.Errorf("Classify(%q) = %s (%s), want %s", tc.f.ErrorMessage, got.Class, got.Reason, tc.want)
			}
			if got.Retryable != tc.want.Retryable() {
				t.Errorf("Classify(%q).Retryable = %v, want %v", tc.f.ErrorMessage, got.Retryable, tc.want.Retryable())
			}
			if got.Reason == "" {
				t.Errorf("Classify(%q).Reason is empty", tc.f.ErrorMessage)
			}
		})
	}
}

// TestClassifyReferenceFamilies checks one message per pattern family of the
// retry policy (docs/retry-policy.md §1.7), so that a family cannot silently
// disappear.
func TestClassifyReferenceFamilies(t *testing.T) {
	t.Parallel()
	families := map[string]string{
		"overloaded":                   "server overloaded",
		"provider returned error":      "Provider returned error",
		"provider_returned_error":      "provider_returned_error",
		"rate limit":                   "rate limit hit",
		"rate-limited":                 "you are rate-limited",
		"ratelimit":                    "ratelimit",
		"too many requests":            "Too Many Requests",
		"429":                          "got 429",
		"500":                          "HTTP 500",
		"502":                          "status=502",
		"503":                          "(503)",
		"504":                          "504.",
		"service unavailable":          "service_unavailable",
		"server error":                 "server error",
		"internal error":               "internal_error",
		"retry your request":           "please retry your request",
		"network error":                "network error",
		"connection error":             "connection-error",
		"connection refused":           "ECONNREFUSED connection refused",
		"other side closed":            "other side closed",
		"fetch failed":                 "fetch failed",
		"upstream connect":             "upstream_connect",
		"upstream request failed":      "upstream request failed",
		"reset before headers":         "reset before headers",
		"socket hang up":               "socket hang up",
		"timed out":                    "operation timed out",
		"time out":                     "time out",
		"timeout":                      "timeout",
		"terminated":                   "terminated",
		"retry delay":                  "retryDelay",
		"stream stall":                 "stream stall",
		"no error details in response": "no error details in response",
		"HTTP2StreamReset":             "HTTP2StreamReset",
		"HTTP2RefusedStream":           "HTTP2RefusedStream",
		"HTTP2EnhanceYourCalm":         "HTTP2EnhanceYourCalm",
		"malformed function call":      "malformed_function_call",
		"socket closed unexpectedly":   "socket connection closed unexpectedly",
		"stream_read_error":            "stream_read_error",
	}
	for name, msg := range families {
		if got := Classify(failure(msg), testNow); got.Class != ClassTransient {
			t.Errorf("family %q: Classify(%q) = %s (%s), want transient", name, msg, got.Class, got.Reason)
		}
	}
	usage := []string{
		"usage limit", "usage_limit_reached", "usage_not_included", "limit_reached", "quota exceeded",
		"QUOTA_EXCEEDED", "quota reached", "resource exhausted", "RESOURCE_EXHAUSTED",
		"You have exhausted your capacity", "quota will reset", "insufficient balance",
		"insufficient_quota", "account rate limit", "rate limit for this account",
	}
	for _, msg := range usage {
		if got := Classify(failure(msg), testNow); got.Class != ClassUsageLimit {
			t.Errorf("usage: Classify(%q) = %s (%s), want usage_limit", msg, got.Class, got.Reason)
		}
	}
}

// TestClassifyStructuredOnly checks that structured signals classify when the
// wording says nothing.
func TestClassifyStructuredOnly(t *testing.T) {
	t.Parallel()
	const opaque = "unexpected response"
	cases := []struct {
		f    Failure
		want Class
	}{
		{failure(opaque, typ("overloaded_error")), tr},
		{failure(opaque, code("rate_limit_error")), tr},
		{failure(opaque, code("server_error")), tr},
		{failure(opaque, typ("api_error")), tr},
		{failure(opaque, status(500)), tr},
		{failure(opaque, status(502)), tr},
		{failure(opaque, status(503)), tr},
		{failure(opaque, status(504)), tr},
		{failure(opaque, status(529)), tr},
		{failure(opaque, status(408)), tr},
		{failure(opaque, status(429)), tr},
		{failure(opaque, code("insufficient_quota")), use},
		{failure(opaque, code("usage_limit_reached")), use},
		{failure(opaque, status(402)), use},
		{failure(opaque, code("context_length_exceeded")), ovf},
		{failure(opaque, status(413)), ovf},
		{failure(opaque, code("previous_response_not_found")), stl},
		{failure(opaque, status(400)), not},
		{failure(opaque, status(401)), not},
		{failure(opaque, status(403)), not},
		{failure(opaque, status(404)), not},
		{failure(opaque), not},
	}
	for _, tc := range cases {
		got := Classify(tc.f, testNow)
		if got.Class != tc.want {
			t.Errorf("Classify(status %d, type %q, code %q) = %s (%s), want %s", tc.f.Status, tc.f.ErrorType, tc.f.ErrorCode, got.Class, got.Reason, tc.want)
		}
	}
}

// TestClassifyTextAgreesWithStructure strips the structured signals from every
// table case: the text alone must either say nothing or agree with the label,
// so text and structure never contradict each other.
func TestClassifyTextAgreesWithStructure(t *testing.T) {
	t.Parallel()
	for _, tc := range classifyCases {
		f := tc.f
		if f.Status == 0 && f.ErrorType == "" && f.ErrorCode == "" && f.Headers == nil {
			continue
		}
		f.Status, f.ErrorType, f.ErrorCode, f.Headers = 0, "", "", nil
		got := Classify(f, testNow)
		switch {
		case got.Class == ClassTransient && tc.want == ClassUsageLimit:
			continue // headers and codes refine throttling into a usage limit
		case tc.name == "known 400 outranks 503 in text":
			continue // the known status is the point of the case
		case got.Class == ClassTransient && tc.want == ClassNotRetryable && Classify(tc.f, testNow).OverLimit:
			continue // the rate-limit headers tell a request over the limit from a throttle (§1.9)
		}
		if got.Class != ClassNotRetryable && got.Class != tc.want {
			t.Errorf("%s: text alone gives %s (%s), structure gives %s", tc.name, got.Class, got.Reason, tc.want)
		}
	}
}

func TestClassifyVerdictDetails(t *testing.T) {
	t.Parallel()
	t.Run("hint from header", func(t *testing.T) {
		v := Classify(failure("Overloaded", status(529), hdr("retry-after", "20")), testNow)
		if !v.HasHint || v.Hint != 20*time.Second || v.Cooldown != 20*time.Second {
			t.Errorf("hint = %v/%v cooldown %v, want 20s/true cooldown 20s", v.Hint, v.HasHint, v.Cooldown)
		}
	})
	t.Run("hint from wording", func(t *testing.T) {
		v := Classify(failure("Rate limit reached. Please try again in 9.816s."), testNow)
		if !v.HasHint || v.Hint != 9816*time.Millisecond {
			t.Errorf("hint = %v/%v, want 9.816s", v.Hint, v.HasHint)
		}
	})
	t.Run("usage window from hint", func(t *testing.T) {
		v := Classify(failure("You've hit your usage limit. Try again in ~158 min."), testNow)
		if v.Class != ClassUsageLimit || v.UsageWindow != 158*time.Minute || v.UsageWindowEstimated {
			t.Errorf("got %s window %v estimated %v, want usage_limit 158m provider", v.Class, v.UsageWindow, v.UsageWindowEstimated)
		}
	})
	t.Run("usage window estimated", func(t *testing.T) {
		v := Classify(failure("insufficient_quota"), testNow)
		if v.UsageWindow != DefaultUsageWindow || !v.UsageWindowEstimated {
			t.Errorf("window %v estimated %v, want %v estimated", v.UsageWindow, v.UsageWindowEstimated, DefaultUsageWindow)
		}
	})
	t.Run("usage window hint 0 kept", func(t *testing.T) {
		v := Classify(failure("insufficient_quota", hdr("retry-after", "0")), testNow)
		if v.UsageWindow != 0 || v.UsageWindowEstimated || !v.HasHint {
			t.Errorf("window %v estimated %v hasHint %v, want 0 from provider", v.UsageWindow, v.UsageWindowEstimated, v.HasHint)
		}
	})
	t.Run("usage window capacity estimate", func(t *testing.T) {
		v := Classify(failure("429 RESOURCE_EXHAUSTED: model capacity reached"), testNow)
		if v.Class != ClassUsageLimit || v.UsageWindow != time.Minute {
			t.Errorf("got %s window %v, want usage_limit 1m", v.Class, v.UsageWindow)
		}
	})
	t.Run("key-scoped", func(t *testing.T) {
		for _, tc := range []struct {
			f    Failure
			want bool
		}{
			{failure("429 rate_limit_error: Number of request tokens has exceeded your per-minute rate limit", status(429), typ("rate_limit_error")), true},
			{failure("Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 10. Please try again in 20ms.", status(429), code("rate_limit_exceeded")), true},
			{failure("You exceeded your current quota, please check your plan and billing details.", status(429), code("insufficient_quota")), true},
			{failure("You've hit your usage limit. Try again in ~158 min."), true},
			{failure("Too Many Requests", status(429)), true},
			{failure("529 overloaded_error: Overloaded", status(529), typ("overloaded_error")), false},
			{failure("The engine is currently overloaded, please try again later", status(429)), false},
			{failure("429 RESOURCE_EXHAUSTED: model capacity reached"), false},
			{failure("500 api_error: Internal server error", status(500), typ("api_error")), false},
			{failure("503 Service Unavailable", status(503)), false},
			{failure("400 invalid_request_error: max_tokens: must be positive", status(400)), false},
		} {
			if v := Classify(tc.f, testNow); v.KeyScoped != tc.want {
				t.Errorf("%q (%s, %s): KeyScoped = %t, want %t", tc.f.ErrorMessage, v.Class, v.Reason, v.KeyScoped, tc.want)
			}
		}
	})
	t.Run("cooldown estimates", func(t *testing.T) {
		for msg, want := range map[string]time.Duration{
			"502 Bad Gateway":      5 * time.Minute,
			"503 unavailable":      time.Minute,
			"rate limit exceeded":  30 * time.Second,
			"HTTP 500":             20 * time.Second,
			"quota exceeded":       30 * time.Minute,
			"socket hang up":       5 * time.Minute,
			"Overloaded":           time.Minute,
			"daily limit exceeded": 30 * time.Minute,
		} {
			if got := Classify(failure(msg), testNow).Cooldown; got != want {
				t.Errorf("Classify(%q).Cooldown = %v, want %v", msg, got, want)
			}
		}
	})
	t.Run("no cooldown for refusal and stale", func(t *testing.T) {
		if c := Classify(failure("declined", details("refusal")), testNow).Cooldown; c != 0 {
			t.Errorf("refusal cooldown = %v, want 0", c)
		}
		if c := Classify(failure("Previous response not found", api("openai-responses")), testNow).Cooldown; c != 0 {
			t.Errorf("stale cooldown = %v, want 0", c)
		}
	})
	t.Run("underlying kept after observable output", func(t *testing.T) {
		v := Classify(failure("Overloaded", observable()), testNow)
		if v.Class != ClassNotRetryable || v.Underlying != ClassTransient || v.Retryable {
			t.Errorf("got class %s underlying %s retryable %v", v.Class, v.Underlying, v.Retryable)
		}
		if !strings.Contains(v.Reason, "observable output") {
			t.Errorf("reason %q does not mention observable output", v.Reason)
		}
	})
	t.Run("underlying equals class", func(t *testing.T) {
		for _, tc := range classifyCases {
			v := Classify(tc.f, testNow)
			if v.Class != ClassNotRetryable && v.Underlying != v.Class {
				t.Errorf("%s: underlying %s != class %s", tc.name, v.Underlying, v.Class)
			}
		}
	})
	t.Run("non-canonical header key", func(t *testing.T) {
		f := failure("Overloaded")
		f.Headers = http.Header{"retry-after": {"3"}}
		if v := Classify(f, testNow); v.Hint != 3*time.Second {
			t.Errorf("hint = %v, want 3s", v.Hint)
		}
	})
}

func TestIsReasonlessAbort(t *testing.T) {
	t.Parallel()
	cases := []struct {
		stopReason, msg string
		content         bool
		want            bool
	}{
		{"aborted", "Request was aborted", false, true},
		{"aborted", "Request was aborted.", false, true},
		{"aborted", "Request was aborted", true, false},
		{"error", "Request was aborted", false, false},
		{"aborted", "Request was aborted by user", false, false},
		{"aborted", "", false, false},
		{"aborted", "request was aborted", false, false},
		{"stop", "Request was aborted", false, false},
	}
	for _, tc := range cases {
		if got := IsReasonlessAbort(tc.stopReason, tc.msg, tc.content); got != tc.want {
			t.Errorf("IsReasonlessAbort(%q, %q, %v) = %v, want %v", tc.stopReason, tc.msg, tc.content, got, tc.want)
		}
	}
	v := ReasonlessAbortVerdict()
	if !v.Retryable || v.Class != ClassTransient || v.HasHint {
		t.Errorf("ReasonlessAbortVerdict() = %+v", v)
	}
}

func TestClassRetryable(t *testing.T) {
	t.Parallel()
	for c, want := range map[Class]bool{
		ClassTransient: true, ClassUsageLimit: true, ClassStaleReplay: true, ClassRefusal: true,
		ClassContextOverflow: false, ClassNotRetryable: false, Class(""): false,
	} {
		if got := c.Retryable(); got != want {
			t.Errorf("%q.Retryable() = %v, want %v", c, got, want)
		}
		if c.String() != string(c) {
			t.Errorf("String() = %q", c.String())
		}
	}
}

func TestWords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"RateLimitError":               "rate limit error",
		"HTTP2StreamReset":             "http2 stream reset",
		"APIConnectionError":           "api connection error",
		"ThrottlingException":          "throttling exception",
		"ECONNRESET":                   "econnreset",
		"Unterminated":                 "unterminated",
		"rate_limit_error":             "rate_limit_error",
		"":                             "",
		"req_011CSHoEeqs5C35K2UUqR7Fy": "req_011 cs ho eeqs5 c35 k2 u uq r7 fy",
	} {
		if got := words(in); got != want {
			t.Errorf("words(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatusFromText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		"status: 429":                   429,
		"status_code=503":               503,
		"status 500":                    500,
		"HTTP 400 model_not_supported":  400,
		"Error: 429":                    429,
		"request failed 502":            502,
		"429 Too Many Requests":         429,
		"429 status code (no body)":     429,
		"Google API error (429): quota": 0,
		"error 1302 from upstream":      0,
		"nothing here":                  0,
		"status 999":                    0,
	} {
		if got := statusFromText(in); got != want {
			t.Errorf("statusFromText(%q) = %d, want %d", in, got, want)
		}
	}
}

// Stale replays say which state went stale; events tell stale reasoning
// from the Responses case.
func TestClassifyStaleCases(t *testing.T) {
	t.Parallel()
	cases := []struct {
		f     Failure
		want  StaleCase
		event string
	}{
		{failure("messages.1.content.0: Invalid `signature` in `thinking` block", status(400), api("anthropic")), StaleReasoningSignature, ErrorClassStaleReasoning},
		{failure("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`. When `thinking` is enabled, a final `assistant` message must start with a thinking block", status(400)), StaleReasoningOrder, ErrorClassStaleReasoning},
		{failure("The encrypted content for item rs_1 could not be verified.", status(400), code("invalid_encrypted_content")), StaleReasoningEncrypted, ErrorClassStaleReasoning},
		{failure("The encrypted content gAAA...IQ== could not be verified. Reason: Encrypted content organization_id did not match the target organization.", status(400)), StaleReasoningEncrypted, ErrorClassStaleReasoning},
		{failure("Previous response with id 'resp_abc' not found.", code("previous_response_not_found")), StaleResponsesState, "stale_replay"},
		{failure("Item with id 'rs_1' not found.", api("openai-responses")), StaleResponsesState, "stale_replay"},
		{failure("Overloaded", status(529)), StaleNone, "transient"},
	}
	for _, tc := range cases {
		v := Classify(tc.f, testNow)
		if v.Stale != tc.want || v.EventClass() != tc.event || v.StaleReasoning() != tc.want.Reasoning() {
			t.Errorf("Classify(%q): stale %q event class %q reasoning %v, want %q %q", tc.f.ErrorMessage, v.Stale, v.EventClass(), v.StaleReasoning(), tc.want, tc.event)
		}
		if tc.want.Reasoning() && (v.Class != ClassStaleReplay || !v.Retryable || v.Cooldown != 0 || !strings.HasPrefix(v.Reason, "stale reasoning state: ")) {
			t.Errorf("Classify(%q) = %+v", tc.f.ErrorMessage, v)
		}
	}
	// After observable output the case is kept, the class is not.
	v := Classify(failure("messages.1.content.0: Invalid `signature` in `thinking` block", observable()), testNow)
	if v.Class != ClassNotRetryable || v.Underlying != ClassStaleReplay || v.Stale != StaleReasoningSignature || v.StaleReasoning() || v.EventClass() != "not_retryable" {
		t.Errorf("after observable output: %+v", v)
	}
}
