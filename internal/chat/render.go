package chat

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

// Kind says what a piece of output is, so that the terminal can style it.
// Plain output ignores it.
type Kind int

// The kinds of output.
const (
	KindText     Kind = iota // the answer
	KindThinking             // thinking, dimmed
	KindUser                 // a user message ("> …")
	KindTool                 // a tool call or result
	KindRetry                // a retry step ("[retry 1/10 in 0.5s: …]")
	KindNotice               // fallback, model and credential notices
	KindError                // failures
	KindInfo                 // session information and hints
)

// Piece is one piece of output. An inline piece continues the current line
// (streamed deltas; a "\n" in it ends the line); any other piece is one whole
// line. The renderer ends an open inline line before it emits a whole line.
type Piece struct {
	Kind   Kind
	Text   string
	Inline bool
}

// String renders pieces as plain text, as the non-terminal mode prints them.
func String(pieces []Piece) string {
	var b strings.Builder
	for _, p := range pieces {
		b.WriteString(p.Text)
		if !p.Inline {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Renderer turns a session's events into output and keeps the state the
// status line shows: whether a prompt runs, whether a retry chain is open
// (Esc cancels it) and whether the retry loader counts down. It does no I/O;
// the time of each event comes from the caller, so tests drive the countdown.
type Renderer struct {
	busy     bool      // between agent_start and prompt_end
	retrying bool      // between auto_retry_start and auto_retry_end
	waiting  bool      // in the backoff of auto_retry_start: the loader shows
	attempt  int32     // the open chain's attempt
	max      int32     // and its maxAttempts
	retryAt  time.Time // when the waiting retry runs

	midLine  bool // an inline line is open
	openKind Kind // the kind of the open inline line
	streamed bool // the current message streamed output
}

// Busy reports whether a prompt runs (from agent_start to prompt_end).
func (r *Renderer) Busy() bool { return r.busy }

// Retrying reports whether a retry chain is open: from auto_retry_start to
// auto_retry_end. While it is, Esc cancels the retry (AbortRetry).
func (r *Renderer) Retrying() bool { return r.retrying }

// Waiting reports whether a retry waits out its delay: the loader shows.
func (r *Renderer) Waiting() bool { return r.waiting }

// Attempt returns the open retry chain's attempt and maxAttempts.
func (r *Renderer) Attempt() (attempt, maxAttempts int32) { return r.attempt, r.max }

// Loader returns the retry loader's text at now, and false when no retry
// waits.
func (r *Renderer) Loader(now time.Time) (string, bool) {
	if !r.waiting {
		return "", false
	}
	return LoaderText(r.attempt, r.max, r.retryAt.Sub(now)), true
}

// LoaderText is the retry loader: "Retrying (2/10) in 3s… (esc to cancel)",
// the time left rounded up, to the tenth of a second under 10 s (a 0.4 s
// wait shows as 0.4s, not 1s), and never below 0.
func LoaderText(attempt, maxAttempts int32, remaining time.Duration) string {
	return fmt.Sprintf("Retrying (%d/%d) in %s… (esc to cancel)", attempt, maxAttempts, remainingText(remaining))
}

// remainingText is a countdown's time left, rounded up: 0s, 0.1s … 9.9s,
// 10s, 11s …
func remainingText(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < 10*time.Second:
		tenths := (d + 100*time.Millisecond - 1) / (100 * time.Millisecond)
		return strconv.FormatFloat(float64(tenths)/10, 'f', -1, 64) + "s"
	default:
		return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) + "s"
	}
}

// RetryFailedText is the final failure of a retry chain: "Retry failed
// after 1 attempt: …", "after 3 attempts: …".
func RetryFailedText(attempts int32, finalError string) string {
	return fmt.Sprintf("Retry failed after %s: %s", plural(int64(attempts), "attempt"), finalError)
}

// plural is "1 attempt", "0 attempts", "2 attempts".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}

// failFastMark is in the final error of a chain whose wait exceeds
// retry.max_delay_ms ("… 1800000ms wait, exceeds retry.maxDelayMs
// (300000ms). Original error: …").
const failFastMark = "wait, exceeds retry.maxDelayMs"

// msInText is a delay in milliseconds inside a final error
// ("Estimated 1800000ms wait, exceeds retry.maxDelayMs (300000ms)").
var msInText = regexp.MustCompile(`\b(\d+)ms\b`)

// NotStartedText is the retry line of a chain that ended before its first
// retry started (a fail-fast: the wait the provider asks for, or agentd
// estimates, exceeds retry.max_delay_ms): "[retry 1 not started:
// Estimated 30m0s wait, exceeds retry.maxDelayMs (5m0s)]", the original
// error left to the failure line that follows.
func NotStartedText(attempt int32, finalError string) string {
	why, _, _ := strings.Cut(finalError, ". Original error: ")
	why = msInText.ReplaceAllStringFunc(why, func(m string) string {
		ms, err := strconv.ParseInt(strings.TrimSuffix(m, "ms"), 10, 64)
		if err != nil {
			return m
		}
		return FormatDelay(ms)
	})
	return fmt.Sprintf("[retry %d not started: %s]", attempt, why)
}

// FormatDelay writes a retry delay briefly: 0s, 0.01s, 0.5s, 2s, 1.5s, 30s,
// 5m0s.
func FormatDelay(ms int64) string {
	switch {
	case ms <= 0:
		return "0s"
	case ms < 100:
		return strconv.FormatFloat(math.Round(float64(ms)/10)/100, 'f', -1, 64) + "s"
	case ms < 10000:
		return strconv.FormatFloat(math.Round(float64(ms)/100)/10, 'f', -1, 64) + "s"
	case ms < 60000:
		return strconv.FormatInt((ms+500)/1000, 10) + "s"
	default:
		return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
	}
}

// Reset forgets the state of a prompt that ended without its prompt_end (the
// stream failed for good) and closes an open line.
func (r *Renderer) Reset() []Piece {
	var out []Piece
	r.endLine(&out)
	r.busy, r.retrying, r.waiting, r.streamed = false, false, false, false
	return out
}

// Line returns text as a whole line of kind k, ending an open inline line
// first (for notices that are not events: connection lost, errors).
func (r *Renderer) Line(k Kind, text string) []Piece {
	var out []Piece
	r.line(&out, k, text)
	return out
}

// endLine ends an open inline line.
func (r *Renderer) endLine(out *[]Piece) {
	if r.midLine {
		*out = append(*out, Piece{Kind: r.openKind, Text: "\n", Inline: true})
		r.midLine = false
	}
}

func (r *Renderer) line(out *[]Piece, k Kind, text string) {
	r.endLine(out)
	*out = append(*out, Piece{Kind: k, Text: text})
}

func (r *Renderer) inline(out *[]Piece, k Kind, text string) {
	if text == "" {
		return
	}
	if r.midLine && r.openKind != k {
		r.endLine(out)
	}
	if !r.midLine && k == KindThinking {
		*out = append(*out, Piece{Kind: k, Text: "thinking: ", Inline: true})
	}
	*out = append(*out, Piece{Kind: k, Text: text, Inline: true})
	r.openKind = k
	r.midLine = !strings.HasSuffix(text, "\n")
	r.streamed = true
}

// Apply takes the next event, received at now, and returns what to print.
func (r *Renderer) Apply(ev *agentdv1.Event, now time.Time) []Piece {
	var out []Piece
	switch p := ev.GetPayload().(type) {
	case *agentdv1.Event_AgentStart:
		r.busy, r.waiting = true, false
	case *agentdv1.Event_MessageStart:
		r.busy, r.waiting, r.streamed = true, false, false
	case *agentdv1.Event_MessageUpdate:
		u := p.MessageUpdate
		r.inline(&out, KindThinking, u.GetThinkingDelta())
		r.inline(&out, KindText, u.GetTextDelta())
	case *agentdv1.Event_MessageEnd:
		m := p.MessageEnd
		if !r.streamed && m.GetText() != "" {
			// A provider that does not stream: the whole text at the end.
			r.inline(&out, KindText, m.GetText())
		}
		r.endLine(&out)
		if m.GetStopReason() == "length" {
			r.line(&out, KindNotice, "(the answer stopped at the output token limit)")
		}
		// An error stop is explained by what follows it: auto_retry_start,
		// auto_retry_end, context_overflow or prompt_end.
		r.streamed = false
	case *agentdv1.Event_ToolCall:
		r.line(&out, KindTool, ToolCallText(p.ToolCall))
	case *agentdv1.Event_AgentEnd:
	case *agentdv1.Event_AutoRetryStart:
		s := p.AutoRetryStart
		r.busy, r.retrying, r.waiting = true, true, true
		r.attempt, r.max = s.GetAttempt(), s.GetMaxAttempts()
		r.retryAt = now.Add(time.Duration(s.GetDelayMs()) * time.Millisecond)
		r.line(&out, KindRetry, fmt.Sprintf("[retry %d/%d in %s: %s]",
			s.GetAttempt(), s.GetMaxAttempts(), FormatDelay(s.GetDelayMs()), s.GetErrorMessage()))
	case *agentdv1.Event_AutoRetryEnd:
		e := p.AutoRetryEnd
		opened := r.retrying
		r.retrying, r.waiting = false, false
		r.attempt, r.max = 0, 0
		if !opened && !e.GetSuccess() && strings.Contains(e.GetFinalError(), failFastMark) {
			// No auto_retry_start before: the chain failed fast. Say so in
			// a retry line, as every other step of a chain is.
			r.line(&out, KindRetry, NotStartedText(e.GetAttempt(), e.GetFinalError()))
		}
		if e.GetSuccess() {
			r.line(&out, KindRetry, fmt.Sprintf("[retry succeeded on attempt %d]", e.GetAttempt()))
		} else {
			r.line(&out, KindError, RetryFailedText(e.GetAttempt(), e.GetFinalError()))
		}
	case *agentdv1.Event_RetryFallbackApplied:
		f := p.RetryFallbackApplied
		r.line(&out, KindNotice, fmt.Sprintf("Fallback: %s -> %s", f.GetFrom(), f.GetTo()))
	case *agentdv1.Event_RetryFallbackSucceeded:
		r.line(&out, KindNotice, "Fallback succeeded on "+p.RetryFallbackSucceeded.GetModel())
	case *agentdv1.Event_ModelChange:
		r.line(&out, KindNotice, ModelChangeText(p.ModelChange))
	case *agentdv1.Event_CredentialSwitched:
		c := p.CredentialSwitched
		r.line(&out, KindNotice, fmt.Sprintf("Credential switched: %s %s -> %s", c.GetProvider(), c.GetFrom(), c.GetTo()))
	case *agentdv1.Event_ContextOverflow:
		r.line(&out, KindError, "Context overflow: the conversation no longer fits the model's context window; not retried: "+
			p.ContextOverflow.GetErrorMessage())
	case *agentdv1.Event_PromptEnd:
		e := p.PromptEnd
		r.endLine(&out)
		r.busy, r.retrying, r.waiting, r.streamed = false, false, false, false
		switch e.GetOutcome() {
		case "completed":
		case "aborted":
			r.line(&out, KindError, outcomeText("Prompt aborted", e.GetError(), "aborted"))
		default:
			r.line(&out, KindError, outcomeText("Prompt "+cmp.Or(e.GetOutcome(), "failed"), e.GetError(), ""))
		}
	default:
		// An event this client does not know yet.
		r.line(&out, KindInfo, "["+ev.GetType()+"]")
	}
	return out
}

func outcomeText(head, errText, same string) string {
	if errText == "" || errText == same {
		return head + "."
	}
	return head + ": " + errText
}

// ModelChangeText is a model_change notice (and a history entry).
func ModelChangeText(m *agentdv1.ModelChange) string {
	s := fmt.Sprintf("Model changed: %s -> %s", m.GetFrom(), m.GetTo())
	if m.GetReason() != "" {
		s += " (" + m.GetReason() + ")"
	}
	return s
}

// ToolCallText describes a tool call: Tool call get_weather {"city":"Paris"} [call_1].
func ToolCallText(c *agentdv1.ToolCall) string {
	input := "{}"
	if c.GetInput() != nil {
		if b, err := json.Marshal(c.GetInput().AsInterface()); err == nil {
			input = string(b)
		}
	}
	return fmt.Sprintf("Tool call %s %s [%s]", c.GetName(), input, c.GetCallId())
}

// ToolResultText describes a tool result the user gave: Tool result
// get_weather [call_1]: sunny.
func ToolResultText(c *agentdv1.ToolCall, res *agentdv1.ToolResult) string {
	head := "Tool result"
	if res.GetIsError() {
		head = "Tool error"
	}
	return fmt.Sprintf("%s %s [%s]: %s", head, c.GetName(), c.GetCallId(), res.GetContent())
}

// RenderMessage renders one entry of the persisted history (ListMessages),
// as shown when the client attaches to a session.
func RenderMessage(m *agentdv1.Message) []Piece { return renderMessage(m, nil) }

// renderMessage renders a history entry; names maps earlier tool call ids
// to their tools' names, for results that do not carry them.
func renderMessage(m *agentdv1.Message, names map[string]string) []Piece {
	var out []Piece
	add := func(k Kind, text string) {
		for l := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
			out = append(out, Piece{Kind: k, Text: l})
		}
	}
	switch m.GetRole() {
	case "model_change":
		if m.GetModelChange() != nil {
			add(KindNotice, ModelChangeText(m.GetModelChange()))
		}
		return out
	case "user":
		var parts []string
		for _, c := range m.GetContent() {
			if c.GetType() == "text" {
				parts = append(parts, c.GetText())
			}
		}
		add(KindUser, "> "+strings.Join(parts, ""))
		return out
	}
	for _, c := range m.GetContent() {
		switch c.GetType() {
		case "text":
			add(KindText, c.GetText())
		case "thinking":
			add(KindThinking, "thinking: "+c.GetText())
		case "redacted_thinking":
			add(KindThinking, "thinking: [redacted]")
		case "tool_call":
			add(KindTool, ToolCallText(&agentdv1.ToolCall{CallId: c.GetToolCallId(), Name: c.GetToolName(), Input: c.GetToolInput()}))
		case "tool_result":
			head := "Tool result"
			if c.GetIsError() {
				head = "Tool error"
			}
			if name := cmp.Or(c.GetToolName(), names[c.GetToolCallId()]); name != "" {
				head += " " + name
			}
			add(KindTool, fmt.Sprintf("%s [%s]: %s", head, c.GetToolCallId(), c.GetText()))
		}
	}
	switch m.GetStopReason() {
	case "error":
		add(KindError, "Error: "+cmp.Or(m.GetErrorMessage(), "unknown error"))
	case "aborted":
		add(KindError, "Aborted: "+cmp.Or(m.GetErrorMessage(), "aborted"))
	}
	return out
}
