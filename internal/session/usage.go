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
