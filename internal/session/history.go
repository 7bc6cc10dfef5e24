package session

import (
	"context"
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

// History persists sessions' histories: a part of every Shared store
// (MemoryStore, Redis).
type History interface {
	// Append stores e at the end of the session's history and returns its index.
	Append(ctx context.Context, sessionID string, e Entry) (int64, error)
	// List returns up to limit entries from offset on, and the total count.
	List(ctx context.Context, sessionID string, offset, limit int) ([]Entry, int, error)
	// Delete drops the session's history.
	Delete(ctx context.Context, sessionID string) error
}
