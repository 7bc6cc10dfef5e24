package retry

import (
	"strings"
	"testing"
	"time"
)

// bedrockCases are Amazon Bedrock's failures as the bedrock provider
// reports them ("<status> <ExceptionName>: <message>", the exception name
// as the error type, status 200 for an exception inside the stream), with
// the wordings of the AWS documentation: the Bedrock API reference
// (ConverseStream errors, ConverseStreamOutput's exception members), the
// user guide's "Troubleshooting Amazon Bedrock API Error Codes" and the
// AWS knowledge-center article on ThrottlingException. They join the
// labelled corpus (classifyCases).
var bedrockCases = []classifyCase{
	{"bedrock sdk throttling requests", failure("429 ThrottlingException: Too many requests, please wait before trying again.", status(429), typ("ThrottlingException"), api("bedrock")), tr},
	{"bedrock sdk throttling requests long", failure("429 ThrottlingException: Too many requests, please wait before trying again. You have sent too many requests. Wait before trying again.", status(429), typ("ThrottlingException"), api("bedrock")), tr},
	{"bedrock sdk throttling rate", failure("429 ThrottlingException: Your request rate is too high. Reduce the frequency of requests.", status(429), typ("ThrottlingException"), api("bedrock")), tr},
	{"bedrock sdk throttling tokens", failure("429 ThrottlingException: Too many tokens, please wait before trying again.", status(429), typ("ThrottlingException"), api("bedrock")), tr},
	{"bedrock sdk tokens per day", failure("429 ThrottlingException: Too many tokens per day, please wait before trying again.", status(429), typ("ThrottlingException"), api("bedrock")), use},
	{"bedrock sdk tokens per day in stream", failure("200 ThrottlingException: Too many tokens per day, please wait before trying again.", status(200), typ("ThrottlingException"), api("bedrock")), use},
	{"bedrock sdk tokens per day stream member name", failure("Too many tokens per day, please wait before trying again.", typ("throttlingException")), use},
	{"bedrock sdk throttling in stream", failure("200 ThrottlingException: The number of requests exceeds the limit. Resubmit your request later.", status(200), typ("ThrottlingException"), api("bedrock")), tr},
	{"bedrock sdk service unavailable", failure("503 ServiceUnavailableException: Bedrock is unable to process your request.", status(503), typ("ServiceUnavailableException"), api("bedrock")), tr},
	{"bedrock sdk service unavailable in stream", failure("200 ServiceUnavailableException: The service isn't currently available. Try again later.", status(200), typ("ServiceUnavailableException"), api("bedrock")), tr},
	{"bedrock sdk model not ready", failure("429 ModelNotReadyException: Model is not ready to serve inference requests. The AWS SDK will automatically retry the operation up to 5 times.", status(429), typ("ModelNotReadyException"), api("bedrock")), tr},
	{"bedrock sdk model stream error", failure("200 ModelStreamErrorException: An error occurred while streaming the response. Retry your request.", status(200), typ("ModelStreamErrorException"), api("bedrock")), tr},
	{"bedrock sdk model stream error original", failure("200 ModelStreamErrorException: The system encountered an unexpected error during processing. Try your request again. (model: 500 The system encountered an unexpected error during processing. Try your request again.)", status(200), typ("ModelStreamErrorException"), api("bedrock")), tr},
	{"bedrock sdk internal server", failure("500 InternalServerException: The server encountered an internal error while processing the request.", status(500), typ("InternalServerException"), api("bedrock")), tr},
	{"bedrock sdk internal server in stream", failure("200 InternalServerException: An internal server error occurred. Retry your request.", status(200), typ("InternalServerException"), api("bedrock")), tr},
	{"bedrock sdk model timeout", failure("408 ModelTimeoutException: The request took too long to process. Processing time exceeded the model timeout length.", status(408), typ("ModelTimeoutException"), api("bedrock")), tr},
	{"bedrock sdk service quota", failure("400 ServiceQuotaExceededException: Your request exceeds the service quota for your account. You can view your quotas at Viewing service quotas. You can resubmit your request later.", status(400), typ("ServiceQuotaExceededException"), api("bedrock")), use},
	{"bedrock sdk input too long", failure("400 ValidationException: Input is too long for requested model.", status(400), typ("ValidationException"), api("bedrock")), ovf},
	{"bedrock sdk input too long via model", failure("400 ValidationException: The model returned the following errors: Input is too long for requested model.", status(400), typ("ValidationException"), api("bedrock")), ovf},
	{"bedrock sdk claude prompt too long", failure("400 ValidationException: The model returned the following errors: prompt is too long: 208310 tokens > 200000 maximum", status(400), typ("ValidationException"), api("bedrock")), ovf},
	{"bedrock sdk too many input tokens", failure("400 ValidationException: Too many input tokens. Max input tokens: 128000, request input token count: 130412", status(400), typ("ValidationException"), api("bedrock")), ovf},
	{"bedrock sdk input too long in stream", failure("200 ValidationException: Input is too long for requested model.", status(200), typ("ValidationException"), api("bedrock")), ovf},
	{"bedrock sdk validation", failure("400 ValidationException: 1 validation error detected: Value '' at 'modelId' failed to satisfy constraint: Member must have length greater than or equal to 1", status(400), typ("ValidationException"), api("bedrock")), not},
	{"bedrock sdk validation malformed", failure("400 ValidationException: Malformed input request: #: required key [messages] not found, please reformat your input and try again.", status(400), typ("ValidationException"), api("bedrock")), not},
	{"bedrock sdk validation in stream", failure("200 ValidationException: Input validation failed. Check your request parameters and retry the request.", status(200), typ("ValidationException"), api("bedrock")), not},
	{"bedrock sdk access denied", failure("403 AccessDeniedException: You don't have access to the model with the specified model ID.", status(403), typ("AccessDeniedException"), api("bedrock")), not},
	{"bedrock sdk access denied marketplace", failure("403 AccessDeniedException: Model access is denied due to IAM user or service role is not authorized to perform the required AWS Marketplace actions (aws-marketplace:ViewSubscriptions, aws-marketplace:Subscribe) to enable access to this model.", status(403), typ("AccessDeniedException"), api("bedrock")), not},
	{"bedrock sdk resource not found", failure("404 ResourceNotFoundException: Model not found.", status(404), typ("ResourceNotFoundException"), api("bedrock")), not},
	{"bedrock sdk throttling after content", failure("200 ThrottlingException: Too many tokens, please wait before trying again.", status(200), typ("ThrottlingException"), api("bedrock"), observable()), not},
	{"bedrock sdk stream error after content", failure("200 ModelStreamErrorException: An error occurred while streaming the response. Retry your request.", status(200), typ("ModelStreamErrorException"), api("bedrock"), details(StopDetailStreamInterrupted)), not},
	{"bedrock sdk signature through bedrock", failure("400 ValidationException: messages.1.content.0: Invalid `signature` in `thinking` block", status(400), typ("ValidationException"), api("bedrock")), stl},
}

func init() { classifyCases = append(classifyCases, bedrockCases...) }

func TestBedrockCases(t *testing.T) {
	t.Parallel()
	for _, tc := range bedrockCases {
		v := Classify(tc.f, testNow)
		if v.Class != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.name, v.Class, v.Reason, tc.want)
		}
	}
}

func TestBedrockDailyWindow(t *testing.T) {
	t.Parallel()
	daily := failure("429 ThrottlingException: Too many tokens per day, please wait before trying again.", status(429), typ("ThrottlingException"), api("bedrock"))
	for _, tc := range []struct {
		now  time.Time
		want time.Duration
	}{
		{testNow, 11*time.Hour + 20*time.Minute}, // 12:40 UTC
		{time.Date(2025, 8, 21, 23, 50, 0, 0, time.UTC), BedrockMinDailyWindow},
		{time.Date(2025, 8, 21, 0, 0, 0, 0, time.UTC), 24 * time.Hour},
		// Another zone: midnight UTC all the same (14:40 in Paris is 12:40 UTC).
		{testNow.In(time.FixedZone("CEST", 2*3600)), 11*time.Hour + 20*time.Minute},
	} {
		v := Classify(daily, tc.now)
		if v.Class != ClassUsageLimit || v.UsageWindow != tc.want || !v.UsageWindowEstimated || v.Cooldown != tc.want {
			t.Errorf("at %v: %s window %v (estimated %v) cooldown %v, want usage_limit %v", tc.now, v.Class, v.UsageWindow, v.UsageWindowEstimated, v.Cooldown, tc.want)
		}
		if !strings.Contains(v.Reason, "00:00 UTC") {
			t.Errorf("reason %q", v.Reason)
		}
	}
	// A throttle of tokens per minute is a backoff, not a block.
	v := Classify(failure("429 ThrottlingException: Too many tokens, please wait before trying again.", status(429), typ("ThrottlingException")), testNow)
	if v.Class != ClassTransient || v.UsageWindow != 0 || !strings.Contains(v.Reason, "throttling_exception") {
		t.Errorf("throttle: %+v", v)
	}
}
