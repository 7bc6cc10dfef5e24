package providertest

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// Error bodies, byte for byte as the providers send them (pretty-printed
// ones compacted; where a documented body is truncated, the message is
// completed with the provider's full wording). See docs/retry-policy.md §6.
const (
	// Anthropic.
	AnthropicOverloaded       = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	AnthropicRateLimit        = `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."}}`
	AnthropicSpendLimit       = `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your specified API usage limits. You will regain access on 2026-09-01 at 00:00 UTC.","details":{"error_code":"enforced_spend_limit_reached"}}}`
	AnthropicPromptTooLong    = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 205351 tokens > 200000 maximum"},"request_id":"req_011CV5J4YZo4J3KLTDZgDN7S"}`
	AnthropicRolesAlternate   = `{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate between \"user\" and \"assistant\""},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`
	AnthropicRequestTooLarge  = `{"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}`
	AnthropicAuthentication   = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`
	AnthropicPermission       = `{"type":"error","error":{"type":"permission_error","message":"OAuth authentication is currently not allowed for this organization.","details":{"error_code":"oauth_not_allowed_for_organization"}}}`
	AnthropicNotFound         = `{"type":"error","error":{"type":"not_found_error","message":"Not found"}}`
	AnthropicAPIError         = `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`
	AnthropicOverloadedStream = `{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`

	// OpenAI.
	OpenAIRateLimit         = `{"error": {"message": "Rate limit reached for gpt-4 in organization org-uVqpjtJiKqvVJMVfvpaounIh on tokens per min (TPM): Limit 10000, Used 8554, Requested 3082. Please try again in 9.816s. Visit https://platform.openai.com/account/rate-limits to learn more.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}`
	OpenAIInsufficientQuota = `{"error": {"message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}`
	OpenAIServerError       = `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`
	OpenAIContextLength     = `{"error":{"message":"This model's maximum context length is 4097 tokens. However, your messages resulted in 4294 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	OpenAIInputTooLong      = `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`
	OpenAIModelNotFound     = `{"error":{"message":"The model does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`
)

// OpenAIPreviousResponseNotFound is the plain-HTTP stale-replay body for a
// previous_response_id.
func OpenAIPreviousResponseNotFound(id string) string {
	return fmt.Sprintf(`{"error":{"message":"Previous response with id '%s' not found.","type":"invalid_request_error","code":"previous_response_not_found"}}`, id)
}

// OpenAIItemNotFound is the 404 stale-replay body for an item id replayed
// with store=false.
func OpenAIItemNotFound(id string) string {
	return fmt.Sprintf(`{"error": {"message": "Item with id '%s' not found. Items are not persisted when `+"`store`"+` is set to false. Try again with `+"`store`"+` set to true, or remove this item from your input.", "type": "invalid_request_error", "param": "input", "code": null}}`, id)
}

// OpenAIInvalidAPIKey is OpenAI's 401 body, which echoes a masked form of
// the key it was given (see [MaskKey]).
func OpenAIInvalidAPIKey(key string) string {
	return fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %s. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, MaskKey(key))
}

// MaskKey masks a key the way OpenAI echoes it: its first 8 and last 4
// characters around asterisks (keys of 12 characters or fewer: asterisks
// only).
func MaskKey(key string) string {
	if len(key) <= 12 {
		return strings.Repeat("*", len(key))
	}
	return key[:8] + strings.Repeat("*", len(key)-12) + key[len(key)-4:]
}

// Body is the canonical error body of a kind for an HTTP status: the
// provider's own body for the statuses quoted here, else a body in the
// provider's error envelope with the status text. key is the API key the
// request carried (OpenAI's 401 echoes it masked).
func Body(kind string, status int, key string) string {
	if kind == provider.KindAnthropic {
		switch status {
		case 400:
			return AnthropicRolesAlternate
		case 401:
			return AnthropicAuthentication
		case 403:
			return AnthropicPermission
		case 404:
			return AnthropicNotFound
		case 413:
			return AnthropicRequestTooLarge
		case 429:
			return AnthropicRateLimit
		case 500:
			return AnthropicAPIError
		case 529:
			return AnthropicOverloaded
		}
		return fmt.Sprintf(`{"type":"error","error":{"type":"api_error","message":%s}}`, jsonString(statusText(status)))
	}
	switch status {
	case 400:
		if kind == provider.KindOpenAIResponses {
			return OpenAIInputTooLong
		}
		return OpenAIContextLength
	case 401:
		return OpenAIInvalidAPIKey(key)
	case 404:
		return OpenAIModelNotFound
	case 429:
		return OpenAIRateLimit
	case 500:
		return OpenAIServerError
	}
	return fmt.Sprintf(`{"error":{"message":%s,"type":"server_error","param":null,"code":null}}`, jsonString(statusText(status)))
}

func statusText(status int) string {
	if status == 529 {
		return "Overloaded"
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return fmt.Sprintf("status %d", status)
}

// AnthropicRateLimitHeaders are the rate-limit headers of a real Anthropic
// answer, plus request-id.
func AnthropicRateLimitHeaders() http.Header {
	return hdr(
		"anthropic-ratelimit-input-tokens-limit", "80000",
		"anthropic-ratelimit-input-tokens-remaining", "80000",
		"anthropic-ratelimit-input-tokens-reset", "2025-08-21T12:40:59Z",
		"anthropic-ratelimit-output-tokens-limit", "16000",
		"anthropic-ratelimit-output-tokens-remaining", "16000",
		"anthropic-ratelimit-output-tokens-reset", "2025-08-21T12:41:00Z",
		"anthropic-ratelimit-requests-limit", "1000",
		"anthropic-ratelimit-requests-remaining", "999",
		"anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z",
		"anthropic-ratelimit-tokens-limit", "96000",
		"anthropic-ratelimit-tokens-remaining", "96000",
		"anthropic-ratelimit-tokens-reset", "2025-08-21T12:40:59Z",
	)
}

// OpenAIRateLimitHeaders are OpenAI's x-ratelimit-* headers with the
// documented sample values.
func OpenAIRateLimitHeaders() http.Header {
	return hdr(
		"x-ratelimit-limit-requests", "60",
		"x-ratelimit-limit-tokens", "150000",
		"x-ratelimit-remaining-requests", "59",
		"x-ratelimit-remaining-tokens", "149984",
		"x-ratelimit-reset-requests", "1s",
		"x-ratelimit-reset-tokens", "6m0s",
	)
}

// OpenAI-compatible servers' error bodies (docs/provider-formats.md §2).
const (
	// OpenRouterCredits is OpenRouter's 402 for an account without credits.
	OpenRouterCredits = `{"error":{"message":"Insufficient credits. This account never purchased credits. Make sure your key is on the correct account or org, and if so, purchase more at https://openrouter.ai/settings/credits","code":402}}`
	// OpenRouterUpstream429 is OpenRouter's error with the upstream's own
	// error in metadata.raw (here Google AI Studio's 429), as a 200 JSON
	// body or inside a stream.
	OpenRouterUpstream429 = `{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"{\n  \"error\": {\n    \"code\": 429,\n    \"message\": \"Resource has been exhausted (e.g. check quota).\",\n    \"status\": \"RESOURCE_EXHAUSTED\"\n  }\n}\n","provider_name":"Google AI Studio"}},"user_id":"user_2abcDEFghiJKLmnoPQRstuVWXyz"}`
	// OllamaBusy is Ollama's answer when its queue is full
	// (server.ErrMaxQueue).
	OllamaBusy = `{"error":"server busy, please try again.  maximum pending requests exceeded"}`
)

// OpenRouterStreamError is OpenRouter's mid-stream error chunk: the error
// and a choice with finish_reason "error", after a 200.
func OpenRouterStreamError(model string, code int, message string) string {
	return fmt.Sprintf(`data: {"id":"gen-1751642570-abcDEF","object":"chat.completion.chunk","created":1751642570,"model":%s,"provider":"Chutes","error":{"code":%d,"message":%s},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error","native_finish_reason":"error"}]}`+"\n\n",
		jsonString(model), code, jsonString(message))
}
