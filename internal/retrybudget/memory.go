// Package retrybudget keeps the retry budget of retry.budget (gRFC A6
// semantics, see retry.Budget) for every provider/model: in memory for a
// single process, or in Redis, shared by every replica. A retry of a
// failed call asks the budget first (Retry); a successful call credits it
// (Succeeded), without any I/O on the caller's path.
package retrybudget

import (
	"context"
	"sync"

	"github.com/agentd/agentd/internal/retry"
)

// Decision is the budget's answer to a retry.
type Decision struct {
	Allowed bool
	// Tokens is the model's budget after the decision.
	Tokens float64
}

// Memory is the in-process budget.
type Memory struct {
	b retry.Budget

	mu     sync.Mutex
	levels map[string]int64 // provider/model -> level (units); absent: full
}

// NewMemory returns a budget where every model starts full.
func NewMemory(b retry.Budget) *Memory {
	return &Memory{b: b, levels: map[string]int64{}}
}

// Budget returns the budget's parameters.
func (m *Memory) Budget() retry.Budget { return m.b }

// Retry spends a token of model's budget when it allows a retry.
func (m *Memory) Retry(_ context.Context, model string) (Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	after, ok := m.b.Spend(m.levelLocked(model))
	m.setLocked(model, after)
	return Decision{Allowed: ok, Tokens: retry.Tokens(after)}, nil
}

// Succeeded credits model's budget with one successful call.
func (m *Memory) Succeeded(model string) { m.credit(model, 1) }

func (m *Memory) credit(model string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.levels[model]; ok {
		m.setLocked(model, m.b.Add(l, n))
	}
}

// Levels returns the tokens of every model whose budget is not full.
func (m *Memory) Levels(context.Context) (map[string]float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]float64, len(m.levels))
	for k, v := range m.levels {
		out[k] = retry.Tokens(v)
	}
	return out, nil
}

// set records model's level as another copy of the budget saw it.
func (m *Memory) set(model string, level int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(model, level)
}

func (m *Memory) levelLocked(model string) int64 {
	if l, ok := m.levels[model]; ok {
		return min(l, m.b.Full())
	}
	return m.b.Full()
}

// setLocked keeps only budgets below full: a model that never failed, or
// has recovered, takes no room.
func (m *Memory) setLocked(model string, level int64) {
	if level >= m.b.Full() {
		delete(m.levels, model)
		return
	}
	m.levels[model] = level
}
