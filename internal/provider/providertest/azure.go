package providertest

import "strings"

// Azure OpenAI's bodies, as its Chat Completions endpoint sends them (the
// texts of Azure's documentation and of the issues users file against the
// openai SDKs with Azure).
const (
	// AzureRateLimit is Azure OpenAI's 429 for a deployment's tokens-per-
	// minute limit; it comes with retry-after (seconds) and retry-after-ms
	// (and, from some regions, x-ms-retry-after-ms) headers.
	AzureRateLimit = `{"error":{"code":"429","message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 2 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."}}`
	// AzureNoAPIVersion is Azure's 404 for a request without api-version
	// (or with one it does not know).
	AzureNoAPIVersion = `{"error":{"code":"404","message": "Resource not found"}}`
	// AzureDeploymentNotFound is Azure's 404 for a deployment the resource
	// does not have.
	AzureDeploymentNotFound = `{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}`
	// AzureBadKey is Azure's 401 for a wrong api-key.
	AzureBadKey = `{"error":{"code":"401","message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}`
)

// AzureBadToken is Azure OpenAI's 401 for an Entra ID access token it
// does not take (expired, revoked, for another audience).
const AzureBadToken = `{"error":{"code":"401","message":"Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired."}}`

// azureResponses reports whether path is Azure OpenAI's Responses
// endpoint (…/openai/responses, the deployment in the body).
func azureResponses(path string) bool { return strings.HasSuffix(path, "/openai/responses") }

// azureDeployment is the deployment of an Azure OpenAI path
// (…/openai/deployments/{deployment}/chat/completions).
func azureDeployment(path string) (string, bool) {
	_, rest, ok := strings.Cut(path, "/openai/deployments/")
	if !ok {
		return "", false
	}
	d, ok := strings.CutSuffix(rest, "/chat/completions")
	return d, ok && d != "" && !strings.Contains(d, "/")
}
