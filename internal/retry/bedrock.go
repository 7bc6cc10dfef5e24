package retry

import (
	"strings"
	"time"
)

// Amazon Bedrock (provider kind "bedrock"). The provider reports an
// exception as ErrorType, its name as the SDK gives it
// ("ThrottlingException"; "throttlingException" as the stream's
// :exception-type header writes it), with the status (200 for an exception
// inside a 200 stream) and the message, "429 ThrottlingException: Too many
// tokens per day, please wait before trying again.". The exception decides
// (after stale reasoning state and context overflow, which keep their
// rules: an Anthropic signature refused through Bedrock is still a stale
// replay, "Input is too long for requested model." still an overflow):
//
//	ThrottlingException            transient (backoff); with a per-day
//	                               wording ("Too many tokens per day") a
//	                               usage limit until the next 00:00 UTC
//	ServiceUnavailableException,   transient
//	ModelNotReadyException,
//	ModelStreamErrorException,
//	InternalServerException,
//	ModelTimeoutException
//	ServiceQuotaExceededException  usage limit (the estimated window)
//	AccessDeniedException,         not retryable
//	ResourceNotFoundException,
//	ValidationException (other
//	than an overflow)
//
// Any other exception (ModelErrorException, …) goes through the general
// rules. The daily window: Bedrock's per-day token quotas give no reset
// time in the answer (no header, no wording), and AWS does not document
// when a day's quota resets; agentd blocks the credential until the next
// midnight UTC, the boundary of AWS's usage day, and at least
// BedrockMinDailyWindow (a credential blocked at 23:59 UTC is not retried a
// minute later only to be blocked again for a rolling window).

// BedrockMinDailyWindow is the shortest block of a Bedrock per-day quota.
const BedrockMinDailyWindow = DefaultUsageWindow

// bedrockExceptions maps Bedrock's exceptions (after codeKey) to their
// class.
var bedrockExceptions = map[string]Class{
	"throttling_exception":             ClassTransient,
	"service_unavailable_exception":    ClassTransient,
	"model_not_ready_exception":        ClassTransient,
	"model_stream_error_exception":     ClassTransient,
	"internal_server_exception":        ClassTransient,
	"model_timeout_exception":          ClassTransient,
	"service_quota_exceeded_exception": ClassUsageLimit,
	"access_denied_exception":          ClassNotRetryable,
	"resource_not_found_exception":     ClassNotRetryable,
	"validation_exception":             ClassNotRetryable,
}

// bedrockDailyWords are the wordings of a per-day quota in a
// ThrottlingException.
var bedrockDailyWords = []string{"tokens per day", "requests per day", "per day", "daily"}

// bedrockOverflowWords are Bedrock's context-overflow wordings in a
// ValidationException that the general overflow patterns may miss.
var bedrockOverflowWords = []string{
	"input is too long",
	"too many input tokens",
	"number of input tokens exceeds",
	"input tokens exceed",
	"exceeds the maximum context length",
}

// bedrockException is the failure's Bedrock exception (after codeKey) and
// whether it is one: the error type (or code) names one of
// bedrockExceptions.
func (c *facts) bedrockException() (string, bool) {
	for _, k := range []string{c.typ, c.code} {
		if _, ok := bedrockExceptions[k]; ok {
			return k, true
		}
	}
	return "", false
}

// bedrockOverflow reports a ValidationException worded as a context
// overflow.
func (c *facts) bedrockOverflow() (string, bool) {
	if exc, ok := c.bedrockException(); !ok || exc != "validation_exception" {
		return "", false
	}
	for _, w := range bedrockOverflowWords {
		if strings.Contains(c.lower, w) {
			return "Bedrock ValidationException: text matches " + quote(w), true
		}
	}
	return "", false
}

// bedrock classifies a Bedrock exception; daily reports a per-day quota.
func (c *facts) bedrock() (reason string, class Class, daily, ok bool) {
	exc, ok := c.bedrockException()
	if !ok {
		return "", "", false, false
	}
	class = bedrockExceptions[exc]
	name := "Bedrock " + exc
	if exc == "throttling_exception" {
		for _, w := range bedrockDailyWords {
			if strings.Contains(c.lower, w) {
				return name + " with a per-day quota (" + quote(w) + "): blocked until 00:00 UTC", ClassUsageLimit, true, true
			}
		}
	}
	switch class {
	case ClassTransient:
		return name + ": transient, back off and retry", class, false, true
	case ClassUsageLimit:
		return name + ": account quota (usage limit)", class, false, true
	}
	return name + ": not retryable", class, false, true
}

// bedrockDailyWindow is the block of a Bedrock per-day quota at now: until
// the next 00:00 UTC, at least BedrockMinDailyWindow.
func bedrockDailyWindow(now time.Time) time.Duration {
	u := now.UTC()
	next := time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
	return max(next.Sub(u), BedrockMinDailyWindow)
}
