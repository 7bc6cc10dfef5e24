package retry

import (
	"testing"
	"time"
)

// azureRateLimit is the message of Azure OpenAI's 429 (tokens per
// minute); azureCallLimit the requests-per-minute one.
const (
	azureRateLimit = "429 429: Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 2 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."
	azureCallLimit = "429 429: Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after 7 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."
)

// azureCases are Azure OpenAI's failures as the openai client reports them
// for kind azure-openai ("<status> <code>: <message>", Azure's error.code
// being often the status itself), with the wordings of the Azure OpenAI
// documentation (quotas and limits, content filtering, the REST reference's
// error bodies) and of users' reports against the openai SDKs. They join
// the labelled corpus (classifyCases), beside the bare "azure …" messages
// of classify_test.go (without the client's status prefix or api).
var azureCases = []classifyCase{
	{"azure-openai tokens per minute", failure(azureRateLimit, status(429), code("429"), api("azure-openai")), tr},
	{"azure-openai calls per minute", failure(azureCallLimit, status(429), code("429"), api("azure-openai")), tr},
	{"azure-openai tokens per minute with retry-after-ms", failure(azureRateLimit, status(429), code("429"), api("azure-openai"), hdr("retry-after-ms", "1500"), hdr("retry-after", "2")), tr},
	{"azure-openai x-ms-retry-after-ms", failure(azureRateLimit, status(429), code("429"), api("azure-openai"), hdr("x-ms-retry-after-ms", "1200")), tr},
	{"azure-openai free tier a day away", failure("429 429: Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded call rate limit of your current AIServices S0 pricing tier. Please retry after 86400 seconds. Please contact Azure support service if you would like to further increase the default rate limit.", status(429), code("429"), api("azure-openai")), use},
	{"azure-openai apim rate limit", failure("429 429: Rate limit is exceeded. Try again in 6 seconds.", status(429), code("429"), api("azure-openai")), tr},
	{"azure-openai insufficient quota", failure("429 insufficient_quota: You exceeded your current quota, please check your plan and billing details.", status(429), code("insufficient_quota"), api("azure-openai")), use},
	{"azure-openai server error", failure("500 server_error: The server had an error processing your request. Sorry about that! You can retry your request, or contact us through an Azure support request at: https://go.microsoft.com/fwlink/?linkid=2213926 if you keep seeing this error.", status(500), api("azure-openai")), tr},
	{"azure-openai unavailable", failure("503 503: The service is temporarily unable to process your request. Please try again later.", status(503), code("503"), api("azure-openai")), tr},
	{"azure-openai content filter", failure("400 content_filter: The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766", status(400), code("content_filter"), api("azure-openai")), not},
	{"azure-openai context length", failure("400 context_length_exceeded: This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.", status(400), code("context_length_exceeded"), api("azure-openai")), ovf},
	{"azure-openai deployment not found", failure("404 DeploymentNotFound: The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.", status(404), code("DeploymentNotFound"), api("azure-openai")), not},
	{"azure-openai no api-version", failure("404 404: Resource not found", status(404), code("404"), api("azure-openai")), not},
	{"azure-openai bad key", failure("401 401: Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.", status(401), code("401"), api("azure-openai")), not},
	{"azure-openai wrong operation", failure("400 OperationNotSupported: The chatCompletion operation does not work with the specified model, text-embedding-ada-002. Please choose different model and try again.", status(400), code("OperationNotSupported"), api("azure-openai")), not},
	{"azure-openai tokens per minute after content", failure(azureRateLimit, status(200), code("429"), api("azure-openai"), observable()), not},
}

func init() { classifyCases = append(classifyCases, azureCases...) }

func TestAzureCases(t *testing.T) {
	t.Parallel()
	for _, tc := range azureCases {
		v := Classify(tc.f, testNow)
		if v.Class != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.name, v.Class, v.Reason, tc.want)
		}
	}
}

// Azure's hints: retry-after-ms and x-ms-retry-after-ms (milliseconds)
// before retry-after (seconds), then "Please retry after N seconds".
func TestAzureHints(t *testing.T) {
	t.Parallel()
	runHintCases(t, []hintCase{
		{"retry-after-ms before retry-after and the wording", headers("retry-after", "2", "retry-after-ms", "250"), azureRateLimit, 250 * time.Millisecond, true},
		{"x-ms-retry-after-ms", headers("x-ms-retry-after-ms", "1200"), azureRateLimit, 1200 * time.Millisecond, true},
		{"retry-after-ms before x-ms-retry-after-ms", headers("x-ms-retry-after-ms", "900", "retry-after-ms", "800"), "", 800 * time.Millisecond, true},
		{"x-ms-retry-after-ms fractional", headers("x-ms-retry-after-ms", "12.5"), "", 12500 * time.Microsecond, true},
		{"malformed retry-after-ms falls back to retry-after", headers("retry-after-ms", "soon", "retry-after", "3"), "", 3 * time.Second, true},
		{"malformed headers fall back to the wording", headers("retry-after-ms", "-", "x-ms-retry-after-ms", ""), azureRateLimit, 2 * time.Second, true},
		{"the wording alone", nil, azureRateLimit, 2 * time.Second, true},
		{"calls per minute wording", nil, azureCallLimit, 7 * time.Second, true},
		{"a day away", nil, "Please retry after 86400 seconds.", 24 * time.Hour, true},
		{"one second", nil, "Please retry after 1 second.", time.Second, true},
		{"no number", nil, "Please retry after some time.", 0, false},
	})
	// In a verdict: the hint is the delay, the 429 is transient.
	v := Classify(failure(azureRateLimit, status(429), code("429"), api("azure-openai"), hdr("retry-after-ms", "250")), testNow)
	if v.Class != ClassTransient || !v.HasHint || v.Hint != 250*time.Millisecond || v.Cooldown != 250*time.Millisecond {
		t.Errorf("verdict = %+v", v)
	}
}
