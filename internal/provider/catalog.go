package provider

// ModelInfo is what the configuration's model catalog says of one model of
// a provider (providers[].models[]). Every field but Name is optional: zero
// (nil) means unknown, and nothing is checked against an unknown value.
type ModelInfo struct {
	// Name is the model's name at its provider, e.g. "claude-sonnet-4-5".
	Name string
	// ContextWindow is the most tokens the model reads in one call.
	ContextWindow int
	// MaxOutputTokens is the most tokens the model writes in one answer
	// (thinking included): the bound of Params.MaxTokens.
	MaxOutputTokens int
	// SupportsThinking and SupportsTools say whether the model takes
	// Params.Thinking and tools; nil: unknown (taken as yes).
	SupportsThinking *bool
	SupportsTools    *bool
	// Price is the model's price; nil: unknown.
	Price *Price
}

// Price is a model's price in the provider's currency (USD) per million
// tokens.
type Price struct {
	InputPerMTok      float64
	OutputPerMTok     float64
	CacheReadPerMTok  float64
	CacheWritePerMTok float64
}

// ThinkingSupported reports whether the catalog allows thinking for the
// model: true unless SupportsThinking says no.
func (m ModelInfo) ThinkingSupported() bool {
	return m.SupportsThinking == nil || *m.SupportsThinking
}

// Cost is what u costs at price p, in USD: each kind of token at its price
// per million (reasoning tokens are output tokens, priced as such).
func (p Price) Cost(u Usage) float64 {
	return (float64(u.InputTokens)*p.InputPerMTok +
		float64(u.OutputTokens)*p.OutputPerMTok +
		float64(u.CacheReadTokens)*p.CacheReadPerMTok +
		float64(u.CacheWriteTokens)*p.CacheWritePerMTok) / 1e6
}
