// Package bedrock is the provider kind "bedrock": Amazon Bedrock's
// ConverseStream API through the official AWS SDK for Go v2
// (service/bedrockruntime), with the SDK's own retries off (agentd's retry
// engine decides) and redirects never followed.
//
// Credentials. A call with a credential signs with its secret, written
// "ACCESS_KEY_ID:SECRET_ACCESS_KEY" (or
// "ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN" for temporary
// credentials); a call without one signs with the standard AWS chain
// (environment, shared config and credentials files, SSO, web identity,
// container and instance roles), resolved once per client and cached by the
// SDK. The region is the configured one, else the chain's (AWS_REGION,
// the profile's region).
//
// Mapping. Text, client-executed tools (toolSpec with a JSON schema; tool
// calls come back as tool_call blocks, tool results go as toolResult
// blocks of a user turn), reasoning content (reasoningText with its
// signature → a thinking block with Signature; redactedContent → a
// redacted_thinking block whose Data is the bytes in standard base64),
// usage (inputTokens → InputTokens, cacheReadInputTokens and
// cacheWriteInputTokens → CacheReadTokens and CacheWriteTokens,
// outputTokens → OutputTokens). Params: max_tokens,
// temperature, top_p and stop_sequences go in inferenceConfig; thinking is
// Anthropic's {"thinking": {"type": "enabled", "budget_tokens": N}} in
// additionalModelRequestFields (the form Claude models on Bedrock take).
// Images, documents, guardrails, cache points and prompt variables are not
// mapped.
//
// Failures carry what the retry engine needs: the HTTP status (200 for an
// exception inside the stream), the response headers, the exception name
// as the type (ThrottlingException, ServiceUnavailableException,
// ModelStreamErrorException, ValidationException, …) and the message, as
// "429 ThrottlingException: Too many tokens per day, please wait before
// trying again.". A stream that ends before messageStop is a failure.
package bedrock
