package session

import (
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// Spend is token usage and what it cost.
type Spend struct {
	Usage provider.Usage `json:"usage"`
	// CostUSD is the cost of the priced calls among those counted; Priced
	// says whether there was any (without a catalog price a call has no
	// cost, and a sum of unpriced calls none either).
	CostUSD float64 `json:"costUsd,omitempty"`
	Priced  bool    `json:"priced,omitempty"`
}

// add counts one call's usage and cost (nil: unpriced).
func (sp *Spend) add(u provider.Usage, cost *float64) {
	sp.Usage.Add(u)
	if cost != nil {
		sp.CostUSD += *cost
		sp.Priced = true
	}
}

// Cost is the spend's cost, nil when no call was priced.
func (sp Spend) Cost() *float64 {
	if !sp.Priced {
		return nil
	}
	c := sp.CostUSD
	return &c
}

// usagePtr returns a copy of u to point at.
func usagePtr(u provider.Usage) *provider.Usage { return &u }

// costOf is what u cost on model (provider/model) at its catalog price,
// nil when the catalog has no price for it.
func (m *Manager) costOf(model string, u provider.Usage) *float64 {
	p := m.providerOf(model)
	info := p.ModelInfo(strings.TrimPrefix(model, p.Name+"/"))
	if info.Price == nil {
		return nil
	}
	c := info.Price.Cost(u)
	return &c
}

// wasteLocked counts a failed call that a retry or fallback threw away
// (the retry goes on without its output) in the prompt's retry usage.
func (s *Session) wasteLocked(t *turn) {
	s.runWasted.add(t.Usage, t.cost)
	if t.Usage.IsZero() {
		return
	}
	model := t.Message.Model
	s.m.opts.Observer.RetryWasted(s.m.providerOf(model).Name, model, t.Usage)
}

// stickLocked makes credID the credential the session keeps for
// providerName.
func (s *Session) stickLocked(providerName, credID string) {
	if s.sticky == nil {
		s.sticky = map[string]string{}
	}
	s.sticky[providerName] = credID
}

// modelCacheLostLocked reports whether a change of the session's model to
// to moves it off the prompt cache it has: a provider's cache holds one
// model's prompts, and the session's is where its last call that read a
// prompt went.
func (s *Session) modelCacheLostLocked(to string) bool {
	return s.warmModel != "" && s.warmModel != to
}

// credentialCacheLostLocked reports whether a switch to credential to
// moves the session off its prompt cache: the cache is per account.
func (s *Session) credentialCacheLostLocked(to provider.Credential) bool {
	return s.warmModel != "" && s.warmAccount != to.AccountName()
}

// credentialFailed reports whether a call failed because of its credential
// (refused: 401, 403), which the session then stops keeping.
func credentialFailed(res *provider.Result) bool {
	return res.Message.StopReason == provider.StopError && res.Failure != nil &&
		(res.Failure.Status == 401 || res.Failure.Status == 403)
}
