package provider

import (
	"errors"
	"math"
	"testing"
)

func TestValidateParams(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	th := func(budget int, effort string) *Thinking { return &Thinking{BudgetTokens: budget, Effort: effort} }
	for _, tc := range []struct {
		kind string
		p    Params
		want string // the error, "" for none
	}{
		{KindAnthropic, Params{}, ""},
		{KindAnthropic, Params{MaxTokens: 100, Temperature: f(1), TopP: f(0.3), StopSequences: []string{"END"}}, ""},
		{KindAnthropic, Params{Temperature: f(1.5)}, "params.temperature: must be from 0 to 1 (Anthropic)"},
		{KindAnthropic, Params{Temperature: f(math.NaN())}, "params.temperature: must be from 0 to 1 (Anthropic)"},
		{KindAnthropic, Params{Thinking: th(0, "")}, ""},
		{KindAnthropic, Params{Thinking: th(0, EffortHigh), Temperature: f(1), TopP: f(0.95)}, ""},
		{KindAnthropic, Params{Thinking: th(0, EffortLow), Temperature: f(0.2)}, "params.temperature: cannot be set while thinking is on (Anthropic accepts only 1)"},
		{KindAnthropic, Params{Thinking: th(0, EffortLow), TopP: f(0.9)}, "params.top_p: must be from 0.95 to 1 while thinking is on (Anthropic)"},
		{KindAnthropic, Params{Thinking: th(1000, "")}, "params.thinking.budget_tokens: must be at least 1024 (Anthropic)"},
		{KindAnthropic, Params{Thinking: th(2048, ""), MaxTokens: 2048}, "params.thinking.budget_tokens: must be less than params.max_tokens (2048; the budget is 2048)"},
		{KindAnthropic, Params{Thinking: th(0, EffortHigh), MaxTokens: 8000}, "params.thinking.budget_tokens: must be less than params.max_tokens (8000; the budget is 16384)"},
		{KindAnthropic, Params{Thinking: th(0, EffortHigh), MaxTokens: 20000}, ""},
		{KindAnthropic, Params{Thinking: th(2048, EffortLow)}, "params.thinking: set budget_tokens or effort, not both"},
		{KindAnthropic, Params{Thinking: th(0, "max")}, `params.thinking.effort: must be low, medium or high, not "max"`},
		{KindAnthropic, Params{Thinking: th(-1, "")}, "params.thinking.budget_tokens: must not be negative"},
		{KindAnthropic, Params{MaxTokens: -1}, "params.max_tokens: must not be negative"},
		{KindAnthropic, Params{StopSequences: []string{"a", " "}}, "params.stop_sequences[1]: must not be blank"},
		{KindOpenAIResponses, Params{MaxTokens: 16, Temperature: f(2), TopP: f(1), Thinking: th(0, EffortHigh)}, ""},
		{KindOpenAIResponses, Params{StopSequences: []string{"END"}}, "params.stop_sequences: not accepted by the OpenAI Responses API"},
		{KindOpenAIResponses, Params{Thinking: th(2048, "")}, "params.thinking.budget_tokens: not accepted by the OpenAI Responses API (set params.thinking.effort)"},
		{KindOpenAIResponses, Params{MaxTokens: 10}, "params.max_tokens: must be at least 16 (OpenAI Responses)"},
		{KindOpenAIResponses, Params{Temperature: f(2.5)}, "params.temperature: must be from 0 to 2 (OpenAI Responses)"},
		{KindOpenAIResponses, Params{TopP: f(1.1)}, "params.top_p: must be from 0 to 1"},
		{KindOpenAIChat, Params{MaxTokens: 1, StopSequences: []string{"a", "b", "c", "d"}, Thinking: th(0, EffortLow), Temperature: f(0)}, ""},
		{KindOpenAIChat, Params{StopSequences: []string{"a", "b", "c", "d", "e"}}, "params.stop_sequences: at most 4 (OpenAI Chat Completions)"},
		{KindOpenAIChat, Params{Thinking: th(4096, "")}, "params.thinking.budget_tokens: not accepted by the OpenAI Chat Completions API (set params.thinking.effort)"},
		{KindSimulated, Params{Thinking: th(4096, ""), Temperature: f(2), StopSequences: []string{"x"}}, ""},
		{"watsonx", Params{}, `provider: kind "watsonx" is unknown`},
	} {
		err := ValidateParams(tc.kind, tc.p)
		got := ""
		if err != nil {
			got = err.Error()
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Field == "" {
				t.Errorf("%s %+v: %v is not a *ParamError with a field", tc.kind, tc.p, err)
			}
		}
		if got != tc.want {
			t.Errorf("ValidateParams(%s, %+v) = %q, want %q", tc.kind, tc.p, got, tc.want)
		}
	}
}

func TestThinkingBudgetAndLevel(t *testing.T) {
	for _, tc := range []struct {
		th     Thinking
		budget int
		level  string
	}{
		{Thinking{}, 4096, EffortMedium},
		{Thinking{Effort: EffortLow}, 1024, EffortLow},
		{Thinking{Effort: EffortHigh}, 16384, EffortHigh},
		{Thinking{BudgetTokens: 3000}, 3000, EffortMedium},
	} {
		if b, l := tc.th.Budget(), tc.th.Level(); b != tc.budget || l != tc.level {
			t.Errorf("%+v: budget %d level %q, want %d %q", tc.th, b, l, tc.budget, tc.level)
		}
	}
	if MinThinkingBudget != EffortBudget(EffortLow) {
		t.Errorf("low effort's budget %d is not the minimum %d", EffortBudget(EffortLow), MinThinkingBudget)
	}
}
