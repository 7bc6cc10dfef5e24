package provider

import "strings"

// KindAzureOpenAI is Azure OpenAI's Chat Completions API on a resource's
// deployments (package openai, Options.Azure).
const KindAzureOpenAI = "azure-openai"

func init() {
	Kinds = append(Kinds, KindAzureOpenAI)
	kindNames[KindAzureOpenAI] = "Azure OpenAI"
	maxTemperature[KindAzureOpenAI] = 2
}

// SplitEntraSecret splits the secret of an azure-openai credential with
// Entra ID: client credentials "TENANT_ID:CLIENT_ID:CLIENT_SECRET" (the
// client secret may hold colons; the ids hold none).
func SplitEntraSecret(s string) (tenant, clientID, clientSecret string, ok bool) {
	parts := strings.SplitN(strings.TrimSpace(s), ":", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
