package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// ErrNotWaiting is returned for tool results sent to a session whose run
// waits for none.
var ErrNotWaiting = errors.New("session is not waiting for tool results")

// DefaultToolResultTimeout bounds the wait for a client's tool results.
const DefaultToolResultTimeout = 10 * time.Minute

// ToolResult is a client's result of one tool call.
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
}

// pendingCall is a tool call the run waits for.
type pendingCall struct {
	call   ToolCall
	result *ToolResult
}

// toolWait is the set of tool calls of one turn the run waits for.
type toolWait struct {
	calls   []*pendingCall
	byID    map[string]*pendingCall
	missing int
	done    chan struct{} // closed when every call has a result
}

// toolCallsOf returns the complete tool calls of an assistant message.
func toolCallsOf(m *provider.Message) []ToolCall {
	var calls []ToolCall
	for _, b := range m.Content {
		if b.Type == provider.BlockToolCall {
			calls = append(calls, ToolCall{CallID: b.ToolCallID, Name: b.ToolName, Input: b.ToolInput})
		}
	}
	return calls
}

// stripIncompleteToolCalls drops, from a failed message, the tool calls whose
// input never completed (not valid JSON): only completed tool calls remain,
// and only those make a failed turn unsafe to replay.
func stripIncompleteToolCalls(m *provider.Message) {
	kept := m.Content[:0:0]
	for _, b := range m.Content {
		if b.Type == provider.BlockToolCall && (b.ToolCallID == "" || !json.Valid(b.ToolInput)) {
			continue
		}
		kept = append(kept, b)
	}
	m.Content = kept
}

// awaitToolResults announces the turn's tool calls (tool_call events), waits
// for the client's results (SubmitToolResults), and appends them to the
// history and the runtime context as one tool message. It returns a
// non-empty error when the results did not come in time or the run was
// aborted; the calls without a result then get an error result, so the
// conversation stays well-formed for the next prompt.
func (s *Session) awaitToolResults(ctx context.Context, promptID string, calls []ToolCall) string {
	w := &toolWait{byID: map[string]*pendingCall{}, missing: len(calls), done: make(chan struct{})}
	s.mu.Lock()
	for _, c := range calls {
		p := &pendingCall{call: c}
		w.calls = append(w.calls, p)
		w.byID[c.CallID] = p
		s.emit(Event{Type: EventToolCall, PromptID: promptID, ToolCall: &ToolCall{CallID: c.CallID, Name: c.Name, Input: c.Input}})
	}
	s.waiting = w
	s.mu.Unlock()

	timeout := s.m.opts.ToolResultTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	var errText string
	select {
	case <-w.done:
	case <-t.C:
		errText = fmt.Sprintf("no tool results within %v (waiting for %s)", timeout, strings.Join(w.missingIDs(), ", "))
	case <-ctx.Done():
		errText = "aborted while waiting for tool results"
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = nil
	msg := provider.Message{Role: provider.RoleTool}
	for _, p := range w.calls {
		r := p.result
		if r == nil {
			r = &ToolResult{CallID: p.call.CallID, Content: errText, IsError: true}
		}
		msg.Content = append(msg.Content, provider.Block{
			Type: provider.BlockToolResult, ToolCallID: r.CallID, ToolName: p.call.Name, Text: r.Content, IsError: r.IsError,
		})
	}
	if err := s.appendContextLocked(ctx, promptID, msg); err != nil {
		s.m.log.Error("persist tool results", "session", s.id, "err", err)
	}
	return errText
}

func (w *toolWait) missingIDs() []string {
	var ids []string
	for _, p := range w.calls {
		if p.result == nil {
			ids = append(ids, p.call.CallID)
		}
	}
	return ids
}

// SubmitToolResults delivers results of the tool calls the run waits for.
// Every result is checked before any is taken: an unknown call id, a
// duplicate or a session not waiting changes nothing. When every call of
// the turn has its result, the run continues with the next model call.
func (s *Session) SubmitToolResults(ctx context.Context, results []ToolResult) error {
	if len(results) == 0 {
		return invalid("results", "is empty")
	}
	owner, err := s.m.rep.owner(ctx, s)
	if err != nil {
		return err
	}
	if owner != "" {
		return s.m.rep.forward(ctx, s, owner, Control{Op: OpSubmitToolResults, Results: results})
	}
	return s.submitToolResults(results)
}

func (s *Session) submitToolResults(results []ToolResult) error {
	if len(results) == 0 {
		return invalid("results", "is empty")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waiting
	if w == nil {
		return ErrNotWaiting
	}
	seen := map[string]bool{}
	for i, r := range results {
		field := fmt.Sprintf("results[%d].call_id", i)
		p, ok := w.byID[r.CallID]
		switch {
		case r.CallID == "":
			return invalid(field, "is required")
		case !ok:
			return invalid(field, "unknown call id %q (waiting for: %s)", r.CallID, strings.Join(w.missingIDs(), ", "))
		case p.result != nil || seen[r.CallID]:
			return invalid(field, "a result for %q was already submitted", r.CallID)
		case len(r.Content) > s.m.opts.MaxPromptBytes:
			return invalid(fmt.Sprintf("results[%d].content", i), "is %d bytes, more than the limit of %d", len(r.Content), s.m.opts.MaxPromptBytes)
		}
		seen[r.CallID] = true
	}
	for _, r := range results {
		r := r
		w.byID[r.CallID].result = &r
		w.missing--
	}
	if w.missing == 0 {
		close(w.done)
	}
	return nil
}

// closeDanglingToolCallsLocked gives an error result to the completed tool
// calls of a turn that failed or was aborted and will not be replayed: a
// provider refuses a conversation whose tool call has no result, so without
// this every later prompt of the session would fail.
func (s *Session) closeDanglingToolCallsLocked(ctx context.Context, promptID string) {
	n := len(s.context)
	if n == 0 {
		return
	}
	last := &s.context[n-1]
	if last.Role != provider.RoleAssistant || (last.StopReason != provider.StopError && last.StopReason != provider.StopAborted) {
		return
	}
	calls := toolCallsOf(last)
	if len(calls) == 0 {
		return
	}
	reason := "not executed: the turn failed (" + last.ErrorMessage + ")"
	if last.StopReason == provider.StopAborted {
		reason = "not executed: the turn was aborted"
	}
	msg := provider.Message{Role: provider.RoleTool}
	for _, c := range calls {
		msg.Content = append(msg.Content, provider.Block{Type: provider.BlockToolResult, ToolCallID: c.CallID,
			ToolName: c.Name, Text: reason, IsError: true})
	}
	if err := s.appendContextLocked(ctx, promptID, msg); err != nil {
		s.m.log.Error("persist tool results", "session", s.id, "err", err)
	}
}
