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

// entryOverhead is what entrySize counts for an entry besides its strings:
// its index, time, ids and the encoding's field names, about.
const entryOverhead = 128

// entrySize is what limits.max_history_bytes counts of e: the bytes of
// every string it holds (texts, thinking, signatures, reasoning state,
// tool calls' inputs and results, errors) and entryOverhead. It leaves the
// encoding out, so that both stores count alike and nothing is encoded to
// count it; a Redis store holds somewhat more.
func entrySize(e Entry) int64 {
	m := &e.Message
	n := entryOverhead + len(m.Role) + len(m.Model) + len(m.StopReason) + len(m.ErrorMessage) + len(m.StopDetails) + len(e.PromptID)
	for i := range m.Content {
		b := &m.Content[i]
		n += len(b.Type) + len(b.Text) + len(b.Signature) + len(b.Data) + len(b.ReasoningID) + len(b.EncryptedContent) +
			len(b.ToolCallID) + len(b.ToolName) + len(b.ToolInput)
		for _, s := range b.Summary {
			n += len(s)
		}
	}
	if c := e.ModelChange; c != nil {
		n += len(c.From) + len(c.To) + len(c.Reason)
	}
	return int64(n)
}

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
