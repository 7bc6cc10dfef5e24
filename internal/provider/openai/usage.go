package openai

import "github.com/agentd/agentd/internal/provider"

// openAIUsage is a usage object of either API: Chat Completions names its
// counts prompt/completion tokens, the Responses API input/output tokens;
// each reports the cached part of the prompt and the reasoning part of the
// output in a details object.
type openAIUsage struct {
	PromptTokens        int64         `json:"prompt_tokens"`
	CompletionTokens    int64         `json:"completion_tokens"`
	PromptDetails       *usageDetails `json:"prompt_tokens_details"`
	CompletionDetails   *usageDetails `json:"completion_tokens_details"`
	InputTokens         int64         `json:"input_tokens"`
	OutputTokens        int64         `json:"output_tokens"`
	InputTokensDetails  *usageDetails `json:"input_tokens_details"`
	OutputTokensDetails *usageDetails `json:"output_tokens_details"`
}

type usageDetails struct {
	CachedTokens    int64 `json:"cached_tokens"`
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

// usage is agentd's form: OpenAI counts the cached tokens inside the
// prompt's, agentd's InputTokens leaves them out (so that input, cache read
// and cache write add up to the prompt). OpenAI reports no cache writes:
// they are billed as input.
func (u *openAIUsage) usage() provider.Usage {
	in, out := u.PromptTokens+u.InputTokens, u.CompletionTokens+u.OutputTokens
	var cached, reasoning int64
	for _, d := range []*usageDetails{u.PromptDetails, u.InputTokensDetails} {
		if d != nil {
			cached += d.CachedTokens
		}
	}
	for _, d := range []*usageDetails{u.CompletionDetails, u.OutputTokensDetails} {
		if d != nil {
			reasoning += d.ReasoningTokens
		}
	}
	cached = min(max(cached, 0), in)
	return provider.Usage{InputTokens: in - cached, CacheReadTokens: cached, OutputTokens: out, ReasoningTokens: reasoning}
}
