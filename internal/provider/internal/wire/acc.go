package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// Acc accumulates an assistant message as it streams and hands each piece
// to its onDelta as it arrives. Blocks are keyed by the provider's ids
// (block index, item id, tool-call index) and kept in the order they
// started.
type Acc struct {
	// Usage is the call's token usage, as the stream reports it; every
	// result carries it.
	Usage provider.Usage

	model   string
	secrets []string
	onDelta func(provider.Delta)
	blocks  []provider.Block
	// texts holds the text of each block (same index), grown in place as
	// deltas arrive (appending to a string would copy it whole on every
	// delta); content sets the blocks' Text from it.
	texts [][]byte
	keys  map[string]int
	// last is the key of the block looked up last, at index lastAt: a
	// stream's deltas come block after block, so most look-ups are the
	// one before and need not reach the map (whose memory a delta,
	// arriving tens of ms after the one before, finds out of the cache).
	last   string
	lastAt int
	tools  map[int]*toolState
	// deltas counts the deltas handed to onDelta.
	deltas int
	// Answered is the call's provider.Request.Answered: Run calls it
	// once the stream's headers are read.
	Answered func()
}

type toolState struct {
	args strings.Builder
	done bool
}

// NewAcc returns an Acc for a call to model with secret (redacted from
// every error message) that hands deltas to onDelta (which may be nil).
func NewAcc(model, secret string, onDelta func(provider.Delta)) *Acc {
	return NewAccSecrets(model, []string{secret}, onDelta)
}

// NewAccSecrets is NewAcc for a call with several secrets (the parts of a
// structured credential), each redacted from every error message.
func NewAccSecrets(model string, secrets []string, onDelta func(provider.Delta)) *Acc {
	if onDelta == nil {
		onDelta = func(provider.Delta) {}
	}
	return &Acc{model: model, secrets: secrets, onDelta: onDelta, keys: map[string]int{}, tools: map[int]*toolState{}}
}

// block returns the index of key's block, starting one of typ if needed.
func (a *Acc) block(key, typ string) int {
	if key == a.last && len(a.blocks) > 0 {
		return a.lastAt
	}
	i, ok := a.keys[key]
	if !ok {
		a.blocks = append(a.blocks, provider.Block{Type: typ})
		a.texts = append(a.texts, nil)
		i = len(a.blocks) - 1
		a.keys[key] = i
	}
	a.last, a.lastAt = key, i
	return i
}

// AddText appends s to key's text block, starting it if needed, and
// delivers it. An empty s does nothing.
func (a *Acc) AddText(key, s string) {
	a.add(key, provider.BlockText, s, provider.Delta{Text: s})
}

// AddThinking appends s to key's thinking block, starting it if needed,
// and delivers it. An empty s does nothing.
func (a *Acc) AddThinking(key, s string) {
	a.add(key, provider.BlockThinking, s, provider.Delta{Thinking: s})
}

// add appends s to key's block of type typ and delivers d, unless s is
// empty.
func (a *Acc) add(key, typ, s string, d provider.Delta) {
	if s == "" {
		return
	}
	i := a.block(key, typ)
	a.texts[i] = append(a.texts[i], s...)
	a.deltas++
	a.onDelta(d)
}

// StartThinking starts key's thinking block if needed, so that it keeps
// its place among the blocks even when no text arrives (an Anthropic
// signature-only block, an OpenAI reasoning item without summary).
func (a *Acc) StartThinking(key string) { a.block(key, provider.BlockThinking) }

// AddSignature appends a piece of key's thinking block's signature
// (Anthropic signature_delta), starting the block if needed; nothing is
// delivered.
func (a *Acc) AddSignature(key, sig string) {
	i := a.block(key, provider.BlockThinking)
	a.blocks[i].Signature += sig
}

// SetReasoning records an OpenAI reasoning item's id, encrypted content and
// summary parts on key's thinking block, starting it if needed. A block to
// which no text streamed gets the summary parts as its text, separated by
// a blank line; nothing is delivered.
func (a *Acc) SetReasoning(key, id, encrypted string, summary []string) {
	i := a.block(key, provider.BlockThinking)
	b := &a.blocks[i]
	b.ReasoningID, b.EncryptedContent, b.Summary = id, encrypted, summary
	if len(a.texts[i]) == 0 {
		a.texts[i] = append(a.texts[i], strings.Join(summary, ReasoningPartSeparator)...)
	}
}

// ReasoningPartSeparator separates the summary parts of one OpenAI
// reasoning item in its block's text (and in the deltas).
const ReasoningPartSeparator = "\n\n"

// AddRedactedThinking appends opaque data to key's redacted-thinking
// block, starting it if needed; nothing is delivered.
func (a *Acc) AddRedactedThinking(key, data string) {
	i := a.block(key, provider.BlockRedactedThinking)
	a.blocks[i].Data += data
}

// StartTool starts a tool call: its id and name are delivered at once. A
// key already started does nothing.
func (a *Acc) StartTool(key, id, name string) {
	if _, ok := a.keys[key]; ok {
		return
	}
	i := a.block(key, provider.BlockToolCall)
	a.blocks[i].ToolCallID, a.blocks[i].ToolName = id, name
	a.tools[i] = &toolState{}
	a.onDelta(provider.Delta{ToolCallID: id, ToolName: name})
}

// HasTool reports whether key names a started tool call.
func (a *Acc) HasTool(key string) bool {
	i, ok := a.keys[key]
	return ok && a.tools[i] != nil
}

// AddToolArgs appends a piece of a tool call's JSON arguments and delivers
// it; a piece for a call not started or already ended is dropped.
func (a *Acc) AddToolArgs(key, part string) {
	i, ok := a.keys[key]
	if !ok || a.tools[i] == nil || a.tools[i].done || part == "" {
		return
	}
	a.tools[i].args.WriteString(part)
	b := a.blocks[i]
	a.onDelta(provider.Delta{ToolCallID: b.ToolCallID, ToolName: b.ToolName, ToolArgsPart: part})
}

// EndTool completes a tool call; full, when not nil, is the complete
// arguments text as the provider restated it. Empty arguments are {};
// arguments that are not valid JSON are an error.
func (a *Acc) EndTool(key string, full *string) error {
	i, ok := a.keys[key]
	if !ok || a.tools[i] == nil || a.tools[i].done {
		return nil
	}
	t := a.tools[i]
	args := t.args.String()
	if full != nil {
		args = *full
	}
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return fmt.Errorf("tool call %s (%s) ended with invalid JSON arguments", a.blocks[i].ToolCallID, a.blocks[i].ToolName)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(args)) == nil {
		args = buf.String()
	}
	a.blocks[i].ToolInput = json.RawMessage(args)
	t.done = true
	return nil
}

// EndTools completes every started tool call (see EndTool).
func (a *Acc) EndTools() error {
	for key := range a.keys {
		if err := a.EndTool(key, nil); err != nil {
			return err
		}
	}
	return nil
}

// HasCompletedTool reports whether any tool call completed.
func (a *Acc) HasCompletedTool() bool {
	for _, t := range a.tools {
		if t.done {
			return true
		}
	}
	return false
}

// content is the message content: empty text blocks, thinking blocks with
// neither text nor reasoning state, empty redacted blocks and incomplete
// tool calls dropped.
func (a *Acc) content() []provider.Block {
	out := []provider.Block{}
	for i, b := range a.blocks {
		b.Text = string(a.texts[i])
		switch b.Type {
		case provider.BlockText:
			if b.Text == "" {
				continue
			}
		case provider.BlockThinking:
			if b.Text == "" && !b.HasReasoningState() {
				continue
			}
		case provider.BlockRedactedThinking:
			if b.Data == "" {
				continue
			}
		case provider.BlockToolCall:
			if t := a.tools[i]; t == nil || !t.done {
				continue
			}
		}
		out = append(out, b)
	}
	return out
}

func (a *Acc) message(stop, errMsg, details string) provider.Message {
	return provider.Message{
		Role:         provider.RoleAssistant,
		Content:      a.content(),
		Model:        a.model,
		StopReason:   stop,
		ErrorMessage: errMsg,
		StopDetails:  details,
	}
}

// unfinished strips the reasoning state of a message that failed or was
// aborted: a thinking block cut before its signature would be refused, and
// the turn's reasoning is not to be replayed beside a partial answer. The
// thinking text stays, for display.
func unfinished(m provider.Message) provider.Message {
	m.Content = provider.StripReasoningState(m.Content)
	return m
}

// Finish ends a call that succeeded with stop reason stop.
func (a *Acc) Finish(stop string) provider.Result {
	return provider.Result{Message: a.message(stop, "", ""), Usage: a.Usage}
}

// Fail ends a call that failed with msg, details and f (nil: no failure
// to report). The message is redacted; a failure after observable output
// without other details gets provider.DetailInterruptedAfterContent.
func (a *Acc) Fail(msg, details string, f *provider.Failure) provider.Result {
	m := a.message(provider.StopError, redact(msg, a.secrets...), details)
	if details == "" && m.HasObservableOutput() {
		m.StopDetails = provider.DetailInterruptedAfterContent
	}
	return provider.Result{Message: unfinished(m), Failure: f, Usage: a.Usage}
}

// FailAPI ends c, once its response has arrived, with the provider's error
// e (an error answer or an error event): the message is e worded for the
// response's status, and the failure, c's, carries e's type and code.
func (a *Acc) FailAPI(c *Call, e APIError) provider.Result {
	f := c.Failure()
	f.Type, f.Code = e.Type, e.Code
	if e.Body != "" {
		f.Body = redact(e.Body, a.secrets...)
	}
	return a.Fail(e.text(c.resp.StatusCode), "", f)
}

// aborted ends a call whose context is done, keeping what was streamed.
func (a *Acc) aborted() provider.Result {
	return provider.Result{Message: unfinished(a.message(provider.StopAborted, provider.AbortedMessage, "")), Usage: a.Usage}
}
