// Package cooldown keeps the model cooldown registry of the retry engine's
// model fallback (docs/retry-policy.md §4 and §5 step 8: "suppress the
// current model selector for cooldown"). A model in cooldown is skipped as a
// fallback candidate, and a session on a fallback model returns to its
// primary once the primary's cooldown has expired. The registry is shared
// by every session of the process, so one session's failures spare the
// others the same failing model.
package cooldown

import (
	"context"
	"sync"
	"time"
)

// Memory is the in-process registry.
type Memory struct {
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time // provider/model -> end of cooldown
}

// NewMemory returns an empty registry; now is its clock (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, until: map[string]time.Time{}}
}

// Suppress puts model in cooldown until until. A longer cooldown already in
// force is kept.
func (m *Memory) Suppress(_ context.Context, model string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.until[model]; !ok || until.After(cur) {
		m.until[model] = until
	}
	m.gcLocked()
	return nil
}

// SuppressedUntil returns the end of model's cooldown, or the zero time when
// it is not cooling down.
func (m *Memory) SuppressedUntil(_ context.Context, model string) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.until[model]
	if !ok || !u.After(m.now()) {
		return time.Time{}, nil
	}
	return u, nil
}

// Active returns every model cooling down now and the end of its cooldown.
func (m *Memory) Active(context.Context) (map[string]time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gcLocked()
	out := make(map[string]time.Time, len(m.until))
	for k, v := range m.until {
		out[k] = v
	}
	return out, nil
}

// gcLocked drops expired entries.
func (m *Memory) gcLocked() {
	now := m.now()
	for k, v := range m.until {
		if !v.After(now) {
			delete(m.until, k)
		}
	}
}
