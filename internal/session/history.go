package session

import (
	"context"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// Entry is one entry of a session's persisted history: a message (error
// entries included) or a model change.
type Entry struct {
	Index       int64
	Time        time.Time
	PromptID    string
	Message     provider.Message
	ModelChange *ModelChange // set for model_change entries; Message.Role is "model_change"
	// Assistant entries: the call's usage, and its cost in USD when the
	// catalog prices the model.
	Usage   *provider.Usage `json:",omitempty"`
	CostUSD *float64        `json:",omitempty"`
}

// ModelChange records a switch of the session's model.
type ModelChange struct {
	From, To, Reason string
}

// RoleModelChange is the role of a model_change history entry.
const RoleModelChange = "model_change"

// History persists sessions' histories. The memory implementation is the
// default; a shared store (Redis) implements the same interface.
type History interface {
	// Append stores e at the end of the session's history and returns its index.
	Append(ctx context.Context, sessionID string, e Entry) (int64, error)
	// List returns up to limit entries from offset on, and the total count.
	List(ctx context.Context, sessionID string, offset, limit int) ([]Entry, int, error)
	// Delete drops the session's history.
	Delete(ctx context.Context, sessionID string) error
}

// MemoryHistory keeps histories in process memory.
type MemoryHistory struct {
	mu      sync.RWMutex
	entries map[string][]Entry
}

var _ History = (*MemoryHistory)(nil)

// NewMemoryHistory returns an empty in-memory history store.
func NewMemoryHistory() *MemoryHistory {
	return &MemoryHistory{entries: map[string][]Entry{}}
}

// Append implements History.
func (h *MemoryHistory) Append(_ context.Context, sessionID string, e Entry) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.Index = int64(len(h.entries[sessionID]))
	h.entries[sessionID] = append(h.entries[sessionID], e)
	return e.Index, nil
}

// List implements History.
func (h *MemoryHistory) List(_ context.Context, sessionID string, offset, limit int) ([]Entry, int, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	all := h.entries[sessionID]
	if offset >= len(all) {
		return nil, len(all), nil
	}
	end := min(len(all), offset+limit)
	return append([]Entry(nil), all[offset:end]...), len(all), nil
}

// Delete implements History.
func (h *MemoryHistory) Delete(_ context.Context, sessionID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.entries, sessionID)
	return nil
}
