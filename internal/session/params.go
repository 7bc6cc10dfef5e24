package session

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// Model parameters. A session has its own (CreateParams.Params, checked
// against its model's provider kind and catalog when it is created); a
// prompt may override them for its calls (PromptOptions.Params, each field
// set replacing the session's, checked the same way). Every call then gets
// them fitted to the provider and model it goes to (fitParams): a fallback
// model of another kind gets what its kind takes, the rest dropped and
// logged, never a failed call.

// Bounds of the stop sequences agentd accepts (the providers' own bounds,
// tighter for some kinds, are ValidateParams').
const (
	MaxStopSequences    = 16
	MaxStopSequenceSize = 1024
)

// checkParams checks p for model (provider/model): its size, what its
// provider kind accepts (provider.ValidateParams) and what the catalog
// says of the model. The error is an *InvalidError naming the field
// (params.max_tokens, params.thinking.budget_tokens, …).
func (m *Manager) checkParams(model string, p provider.Params) error {
	if n := len(p.StopSequences); n > MaxStopSequences {
		return invalid("params.stop_sequences", "has %d sequences, more than %d", n, MaxStopSequences)
	}
	for i, s := range p.StopSequences {
		if len(s) > MaxStopSequenceSize {
			return invalid(fmt.Sprintf("params.stop_sequences[%d]", i), "is %d bytes, more than %d", len(s), MaxStopSequenceSize)
		}
	}
	prov := m.providerOf(model)
	if err := provider.ValidateParams(prov.Kind, p); err != nil {
		var pe *provider.ParamError
		if errors.As(err, &pe) {
			return &InvalidError{Field: pe.Field, Msg: pe.Problem}
		}
		return invalid("params", "%v", err)
	}
	name := strings.TrimPrefix(model, prov.Name+"/")
	info := prov.ModelInfo(name)
	if p.Thinking != nil && !info.ThinkingSupported() {
		return invalid("params.thinking", "model %s does not support thinking (the model catalog's supports_thinking)", model)
	}
	if max := info.MaxOutputTokens; max > 0 {
		if p.MaxTokens > max {
			return invalid("params.max_tokens", "is %d, more than model %s's max_output_tokens (%d)", p.MaxTokens, model, max)
		}
		if th := p.Thinking; th != nil && prov.Kind == provider.KindAnthropic && th.Budget() >= max {
			return invalid("params.thinking.budget_tokens", "the budget (%d) must be less than model %s's max_output_tokens (%d)", th.Budget(), model, max)
		}
	}
	return nil
}

// mergeParams is base with the fields over sets replacing base's (thinking
// as a whole).
func mergeParams(base, over provider.Params) provider.Params {
	out := base
	if over.MaxTokens != 0 {
		out.MaxTokens = over.MaxTokens
	}
	if over.Temperature != nil {
		out.Temperature = over.Temperature
	}
	if over.TopP != nil {
		out.TopP = over.TopP
	}
	if len(over.StopSequences) > 0 {
		out.StopSequences = over.StopSequences
	}
	if over.Thinking != nil {
		out.Thinking = over.Thinking
	}
	return out
}

// effortOf is the effort whose Anthropic budget (provider.EffortBudget)
// covers budget: for a kind that takes an effort only.
func effortOf(budget int) string {
	switch {
	case budget <= provider.EffortBudget(provider.EffortLow):
		return provider.EffortLow
	case budget <= provider.EffortBudget(provider.EffortMedium):
		return provider.EffortMedium
	}
	return provider.EffortHigh
}

// fitParams is p fitted to a call of prov's model: what the catalog refuses
// (thinking for a model without it, max_tokens above max_output_tokens) and
// what prov's kind refuses (provider.ValidateParams) is dropped or mapped
// (a thinking budget becomes an effort for a kind that takes only one).
// notes says what changed, for the log; none for parameters the session
// was created with on its primary model, which were checked then.
func fitParams(prov Provider, model string, p provider.Params) (provider.Params, []string) {
	var notes []string
	info := prov.ModelInfo(model)
	if p.Thinking != nil && !info.ThinkingSupported() {
		p.Thinking = nil
		notes = append(notes, "params.thinking: the model does not support thinking (model catalog)")
	}
	if max := info.MaxOutputTokens; max > 0 && p.MaxTokens > max {
		notes = append(notes, fmt.Sprintf("params.max_tokens: %d lowered to the model's max_output_tokens (%d)", p.MaxTokens, max))
		p.MaxTokens = max
	}
	// Each round drops or maps the field ValidateParams names: at most one
	// round per field.
	for range 8 {
		err := provider.ValidateParams(prov.Kind, p)
		if err == nil {
			return p, notes
		}
		var pe *provider.ParamError
		if !errors.As(err, &pe) {
			break
		}
		notes = append(notes, pe.Error())
		switch f := pe.Field; {
		case f == "params.max_tokens":
			p.MaxTokens = 0
		case f == "params.temperature":
			p.Temperature = nil
		case f == "params.top_p":
			p.TopP = nil
		case strings.HasPrefix(f, "params.stop_sequences"):
			p.StopSequences = nil
		case f == "params.thinking.budget_tokens" && p.Thinking != nil && prov.Kind != provider.KindAnthropic:
			p.Thinking = &provider.Thinking{Effort: effortOf(p.Thinking.BudgetTokens)}
		case f == "params.thinking.budget_tokens" && p.Thinking != nil && p.Thinking.BudgetTokens > 0 && p.Thinking.BudgetTokens < provider.MinThinkingBudget:
			p.Thinking = &provider.Thinking{BudgetTokens: provider.MinThinkingBudget}
		case f == "params.thinking.budget_tokens":
			// Not below max_tokens: the client raises max_tokens itself.
			p.MaxTokens = 0
		case strings.HasPrefix(f, "params.thinking"):
			p.Thinking = nil
		default:
			p = provider.Params{}
		}
	}
	if provider.ValidateParams(prov.Kind, p) != nil {
		notes = append(notes, "every parameter dropped")
		p = provider.Params{}
	}
	return p, notes
}
