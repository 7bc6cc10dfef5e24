package sessionstore

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/agentd/agentd/internal/jsonenc"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/session"
)

// appendStoredEvent appends e as its session's stream entry holds it: the
// JSON object json.Marshal writes for e, without the fields that are zero
// and without SessionID and Seq (the stream's key and the entry's id hold
// them; Events puts them back). json.Unmarshal reads it into the same
// Event as json.Marshal's whole object, so replicas that wrote whole
// objects and replicas that write these read each other's entries: a
// message_update of a short delta is ≈ 130 bytes instead of ≈ 600, and it
// is written without reflection (the rare pointer fields that are not a
// delta's, usage and tool calls, go through json.Marshal).
//
// TestStoredEventIsMarshal holds it to json.Marshal for every field.
func appendStoredEvent(b []byte, e *session.Event) ([]byte, error) {
	start := len(b)
	b = append(b, '{')
	if !e.Time.IsZero() {
		b = append(b, `"Time":"`...)
		t, err := e.Time.AppendText(b)
		if err != nil {
			return b[:start], fmt.Errorf("event %d: Time: %w", e.Seq, err)
		}
		b = append(t, '"')
	}
	b = field(b, start, "Type", e.Type)
	b = field(b, start, "PromptID", e.PromptID)
	b = field(b, start, "Role", e.Role)
	b = field(b, start, "Model", e.Model)
	b = field(b, start, "Credential", e.Credential)
	b = field(b, start, "TextDelta", e.TextDelta)
	b = field(b, start, "ThinkingDelta", e.ThinkingDelta)
	if d := e.ToolCallDelta; d != nil {
		b = key(b, start, "ToolCallDelta")
		o := len(b)
		b = append(b, '{')
		b = field(b, o, "CallID", d.CallID)
		b = field(b, o, "Name", d.Name)
		b = field(b, o, "InputDelta", d.InputDelta)
		b = append(b, '}')
	}
	b = field(b, start, "StopReason", e.StopReason)
	b = field(b, start, "ErrorMessage", e.ErrorMessage)
	b = field(b, start, "StopDetails", e.StopDetails)
	b = field(b, start, "Text", e.Text)
	b = field(b, start, "ErrorClass", e.ErrorClass)
	if c := e.ToolCall; c != nil {
		b = key(b, start, "ToolCall")
		o := len(b)
		b = append(b, '{')
		b = field(b, o, "CallID", c.CallID)
		b = field(b, o, "Name", c.Name)
		if c.Input != nil {
			b = key(b, o, "Input")
			var ok bool
			if b, ok = jsonenc.AppendRaw(b, c.Input); !ok {
				return b[:start], fmt.Errorf("event %d: ToolCall.Input is not JSON", e.Seq)
			}
		}
		b = append(b, '}')
	}
	b = intField(b, start, "Attempt", int64(e.Attempt))
	b = intField(b, start, "MaxAttempts", int64(e.MaxAttempts))
	b = intField(b, start, "Delay", int64(e.Delay))
	b = field(b, start, "DelaySource", e.DelaySource)
	if e.Success {
		b = append(key(b, start, "Success"), "true"...)
	}
	b = field(b, start, "FinalError", e.FinalError)
	b = field(b, start, "From", e.From)
	b = field(b, start, "To", e.To)
	b = field(b, start, "Reason", e.Reason)
	b = field(b, start, "Provider", e.Provider)
	if e.CacheLost {
		b = append(key(b, start, "CacheLost"), "true"...)
	}
	b = field(b, start, "Outcome", e.Outcome)
	b = field(b, start, "Error", e.Error)
	var err error
	if b, err = usageField(b, start, "Usage", e.Usage); err != nil {
		return b[:start], fmt.Errorf("event %d: %w", e.Seq, err)
	}
	if b, err = costField(b, start, "CostUSD", e.CostUSD); err != nil {
		return b[:start], fmt.Errorf("event %d: %w", e.Seq, err)
	}
	if b, err = usageField(b, start, "RetryUsage", e.RetryUsage); err != nil {
		return b[:start], fmt.Errorf("event %d: %w", e.Seq, err)
	}
	if b, err = costField(b, start, "RetryCostUSD", e.RetryCostUSD); err != nil {
		return b[:start], fmt.Errorf("event %d: %w", e.Seq, err)
	}
	return append(b, '}'), nil
}

// key appends "name": to the object that starts at b[start], after a comma
// unless it is the object's first member.
func key(b []byte, start int, name string) []byte {
	if len(b) > start+1 {
		b = append(b, ',')
	}
	return append(append(append(b, '"'), name...), `":`...)
}

// field appends the member name: s unless s is empty.
func field(b []byte, start int, name, s string) []byte {
	if s == "" {
		return b
	}
	return jsonenc.AppendString(key(b, start, name), s)
}

// intField appends the member name: n unless n is 0.
func intField(b []byte, start int, name string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(key(b, start, name), n, 10)
}

// usageField appends the member name: u unless u is nil (json.Marshal's
// object: the usage's own tags leave out what it does not count).
func usageField(b []byte, start int, name string, u *provider.Usage) ([]byte, error) {
	if u == nil {
		return b, nil
	}
	data, err := json.Marshal(u)
	if err != nil {
		return b, fmt.Errorf("%s: %w", name, err)
	}
	return append(key(b, start, name), data...), nil
}

// costField appends the member name: f unless f is nil; an error for a
// cost JSON cannot hold (json.Marshal's).
func costField(b []byte, start int, name string, f *float64) ([]byte, error) {
	if f == nil {
		return b, nil
	}
	b, ok := jsonenc.AppendFloat(key(b, start, name), *f)
	if !ok {
		return b, fmt.Errorf("%s: unsupported value %v", name, *f)
	}
	return b, nil
}
