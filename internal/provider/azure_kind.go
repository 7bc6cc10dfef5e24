package provider

// KindAzureOpenAI is Azure OpenAI's Chat Completions API on a resource's
// deployments (package openai, Options.Azure).
const KindAzureOpenAI = "azure-openai"

func init() {
	Kinds = append(Kinds, KindAzureOpenAI)
	kindNames[KindAzureOpenAI] = "Azure OpenAI"
	maxTemperature[KindAzureOpenAI] = 2
}
