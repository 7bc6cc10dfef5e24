package session

import (
	"reflect"
	"testing"

	"github.com/agentd/agentd/internal/provider"
)

// A call to another kind or model gets what it can take: the rest is
// dropped or mapped, never a failed call.
func TestFitParams(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	no := false
	anth := Provider{Name: "anth", Kind: provider.KindAnthropic,
		Catalog: map[string]provider.ModelInfo{"old": {Name: "old", MaxOutputTokens: 4096, SupportsThinking: &no}}}
	resp := Provider{Name: "oai", Kind: provider.KindOpenAIResponses}
	chat := Provider{Name: "chat", Kind: provider.KindOpenAIChat}
	for _, tc := range []struct {
		name  string
		prov  Provider
		model string
		in    provider.Params
		want  provider.Params
		notes int
	}{
		{"fits", anth, "new", provider.Params{MaxTokens: 8000, StopSequences: []string{"END"}},
			provider.Params{MaxTokens: 8000, StopSequences: []string{"END"}}, 0},
		{"responses: no stop sequences, budget as effort", resp, "gpt-5",
			provider.Params{StopSequences: []string{"END"}, Thinking: &provider.Thinking{BudgetTokens: 2048}},
			provider.Params{Thinking: &provider.Thinking{Effort: "medium"}}, 2},
		{"chat: at most 4 stops, a big budget is high", chat, "gpt-5",
			provider.Params{StopSequences: []string{"a", "b", "c", "d", "e"}, Thinking: &provider.Thinking{BudgetTokens: 30000}},
			provider.Params{Thinking: &provider.Thinking{Effort: "high"}}, 2},
		{"anthropic: temperature off while thinking", anth, "new",
			provider.Params{Temperature: f(1.5), Thinking: &provider.Thinking{Effort: "low"}},
			provider.Params{Thinking: &provider.Thinking{Effort: "low"}}, 1},
		{"catalog: no thinking, max tokens lowered", anth, "old",
			provider.Params{MaxTokens: 8000, Thinking: &provider.Thinking{BudgetTokens: 2048}},
			provider.Params{MaxTokens: 4096}, 2},
		{"responses: max_tokens too small", resp, "gpt-5", provider.Params{MaxTokens: 8}, provider.Params{}, 1},
	} {
		got, notes := fitParams(tc.prov, tc.model, tc.in)
		if !reflect.DeepEqual(got, tc.want) || len(notes) != tc.notes {
			t.Errorf("%s: fitParams = %+v %q; want %+v with %d notes", tc.name, got, notes, tc.want, tc.notes)
		}
		if err := provider.ValidateParams(tc.prov.Kind, got); err != nil {
			t.Errorf("%s: the fitted params are refused: %v", tc.name, err)
		}
	}
}
