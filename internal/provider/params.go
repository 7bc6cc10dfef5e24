package provider

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Params are the model parameters of one call. The zero Params asks for the
// provider's defaults. Each kind maps them onto its own wire fields:
//
//	                 anthropic            openai-responses          openai-chat             gemini (generationConfig)   simulated
//	MaxTokens        max_tokens           max_output_tokens         max_completion_tokens   maxOutputTokens             -
//	Temperature      temperature          temperature               temperature             temperature                 -
//	TopP             top_p                top_p                     top_p                   topP                        -
//	StopSequences    stop_sequences       (refused)                 stop                    stopSequences               -
//	Thinking         thinking: enabled,   reasoning: {effort,       reasoning_effort        thinkingConfig: {           thinking deltas and
//	                 budget_tokens        summary: "auto"}                                  thinkingBudget: Budget(),   a signature
//	                                                                                        includeThoughts: true}
//
// [ValidateParams] says what a kind refuses; providers map what they are
// given without checking.
type Params struct {
	// MaxTokens bounds the answer's output tokens (Anthropic: thinking
	// included); 0: the provider's default (Anthropic: the provider's
	// configured max_tokens; OpenAI: none sent, the model's own).
	MaxTokens int `json:"maxTokens,omitempty"`
	// Temperature and TopP, when set, are sent as they are.
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"topP,omitempty"`
	// StopSequences end the answer where the model writes one of them.
	StopSequences []string `json:"stopSequences,omitempty"`
	// Thinking, when set, turns extended thinking (reasoning) on.
	Thinking *Thinking `json:"thinking,omitempty"`
}

// Thinking asks for extended thinking: a budget of tokens (Anthropic only)
// or an effort. Neither set: EffortMedium.
type Thinking struct {
	// BudgetTokens is Anthropic's budget_tokens (at least MinThinkingBudget,
	// below max_tokens).
	BudgetTokens int `json:"budgetTokens,omitempty"`
	// Effort is EffortLow, EffortMedium or EffortHigh: OpenAI's reasoning
	// effort, or for Anthropic the budget EffortBudget gives.
	Effort string `json:"effort,omitempty"`
}

// Thinking efforts.
const (
	EffortLow    = "low"
	EffortMedium = "medium"
	EffortHigh   = "high"
)

// MinThinkingBudget is the smallest budget_tokens Anthropic accepts.
const MinThinkingBudget = 1024

// EffortBudget is the Anthropic thinking budget of an effort: low 1024
// (the API's minimum), medium 4096, high 16384 tokens. Anything else is
// medium's.
func EffortBudget(effort string) int {
	switch effort {
	case EffortLow:
		return 1024
	case EffortHigh:
		return 16384
	}
	return 4096
}

// Budget is the thinking budget asked for: BudgetTokens, else the budget of
// the effort (EffortBudget).
func (t *Thinking) Budget() int {
	if t.BudgetTokens > 0 {
		return t.BudgetTokens
	}
	return EffortBudget(t.Effort)
}

// Level is the effort asked for: Effort, else EffortMedium.
func (t *Thinking) Level() string {
	if t.Effort == "" {
		return EffortMedium
	}
	return t.Effort
}

// ParamError is a parameter a provider kind refuses. Field is the
// parameter's path ("params.temperature", "params.thinking.budget_tokens").
type ParamError struct {
	Field   string
	Problem string
}

func (e *ParamError) Error() string { return e.Field + ": " + e.Problem }

func paramErr(field, format string, args ...any) error {
	return &ParamError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Names of the kinds in error texts.
var kindNames = map[string]string{
	KindAnthropic:       "Anthropic",
	KindOpenAIResponses: "OpenAI Responses",
	KindOpenAIChat:      "OpenAI Chat Completions",
	KindGemini:          "Gemini",
	KindSimulated:       "simulated",
}

// maxTemperature is the highest temperature each kind accepts.
var maxTemperature = map[string]float64{
	KindAnthropic:       1,
	KindOpenAIResponses: 2,
	KindOpenAIChat:      2,
	KindGemini:          2,
	KindSimulated:       2,
}

// maxChatStops is how many stop sequences Chat Completions accepts;
// maxGeminiStops Gemini's generationConfig.stopSequences.
const (
	maxChatStops   = 4
	maxGeminiStops = 5
)

// ValidateParams checks p against what the provider kind's API accepts, and
// returns the first problem as a *ParamError naming the field, e.g.
// "params.temperature: cannot be set while thinking is on (Anthropic
// accepts only 1)". Rules:
//
//   - every kind: max_tokens not negative; temperature from 0 to 1
//     (Anthropic) or 2; top_p from 0 to 1; no blank stop sequence; effort
//     low, medium or high; budget_tokens not negative, and not together with
//     an effort;
//   - anthropic: budget_tokens at least 1024 and, with an explicit
//     max_tokens, below it (with the provider's default max_tokens the
//     client raises max_tokens itself); while thinking is on, temperature
//     only 1 and top_p only from 0.95 to 1, as the API requires;
//   - openai-responses: no stop sequences (the Responses API has none), no
//     budget_tokens (effort only), max_tokens at least 16;
//   - openai-chat: at most 4 stop sequences, no budget_tokens (effort only);
//   - gemini and vertex: at most 5 stop sequences (budget_tokens and effort both map
//     onto thinkingConfig.thinkingBudget).
//
// Model-specific refusals (a reasoning model that takes no temperature) are
// the provider's to report.
func ValidateParams(kind string, p Params) error {
	name, ok := kindNames[kind]
	if !ok {
		return paramErr("provider", "kind %s is unknown", strconv.Quote(kind))
	}
	if p.MaxTokens < 0 {
		return paramErr("params.max_tokens", "must not be negative")
	}
	if t := p.Temperature; t != nil && !inRange(*t, 0, maxTemperature[kind]) {
		return paramErr("params.temperature", "must be from 0 to %v (%s)", maxTemperature[kind], name)
	}
	if t := p.TopP; t != nil && !inRange(*t, 0, 1) {
		return paramErr("params.top_p", "must be from 0 to 1")
	}
	for i, s := range p.StopSequences {
		if strings.TrimSpace(s) == "" {
			return paramErr("params.stop_sequences["+strconv.Itoa(i)+"]", "must not be blank")
		}
	}
	th := p.Thinking
	if th != nil {
		switch th.Effort {
		case "", EffortLow, EffortMedium, EffortHigh:
		default:
			return paramErr("params.thinking.effort", "must be low, medium or high, not %s", strconv.Quote(th.Effort))
		}
		if th.BudgetTokens < 0 {
			return paramErr("params.thinking.budget_tokens", "must not be negative")
		}
		if th.BudgetTokens > 0 && th.Effort != "" {
			return paramErr("params.thinking", "set budget_tokens or effort, not both")
		}
	}
	switch kind {
	case KindAnthropic:
		if th == nil {
			return nil
		}
		if th.BudgetTokens > 0 && th.BudgetTokens < MinThinkingBudget {
			return paramErr("params.thinking.budget_tokens", "must be at least %d (Anthropic)", MinThinkingBudget)
		}
		if p.MaxTokens > 0 && th.Budget() >= p.MaxTokens {
			return paramErr("params.thinking.budget_tokens", "must be less than params.max_tokens (%d; the budget is %d)", p.MaxTokens, th.Budget())
		}
		if t := p.Temperature; t != nil && *t != 1 {
			return paramErr("params.temperature", "cannot be set while thinking is on (Anthropic accepts only 1)")
		}
		if t := p.TopP; t != nil && !inRange(*t, 0.95, 1) {
			return paramErr("params.top_p", "must be from 0.95 to 1 while thinking is on (Anthropic)")
		}
	case KindOpenAIResponses:
		if len(p.StopSequences) > 0 {
			return paramErr("params.stop_sequences", "not accepted by the OpenAI Responses API")
		}
		if th != nil && th.BudgetTokens > 0 {
			return paramErr("params.thinking.budget_tokens", "not accepted by the OpenAI Responses API (set params.thinking.effort)")
		}
		if p.MaxTokens > 0 && p.MaxTokens < 16 {
			return paramErr("params.max_tokens", "must be at least 16 (OpenAI Responses)")
		}
	case KindOpenAIChat, KindAzureOpenAI:
		if len(p.StopSequences) > maxChatStops {
			return paramErr("params.stop_sequences", "at most %d (OpenAI Chat Completions)", maxChatStops)
		}
		if th != nil && th.BudgetTokens > 0 {
			return paramErr("params.thinking.budget_tokens", "not accepted by the OpenAI Chat Completions API (set params.thinking.effort)")
		}
	case KindGemini, KindVertex:
		if len(p.StopSequences) > maxGeminiStops {
			return paramErr("params.stop_sequences", "at most %d (Gemini)", maxGeminiStops)
		}
	}
	return nil
}

func inRange(v, lo, hi float64) bool {
	return !math.IsNaN(v) && v >= lo && v <= hi
}
