// Package provider defines what a session needs from an LLM provider: one
// streaming call that reports its output as it arrives and ends with the
// assistant message it produced. Providers report failures (with the
// provider's wording, HTTP status, headers and error codes); sessions decide
// what to do about them.
package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/agentd/agentd/internal/retry"
)

// Kinds of provider, as named in the configuration.
const (
	KindAnthropic       = "anthropic"
	KindOpenAIResponses = "openai-responses"
	KindOpenAIChat      = "openai-chat"
	KindGemini          = "gemini"
	KindSimulated       = "simulated"
)

// Kinds lists every provider kind agentd knows.
var Kinds = []string{KindAnthropic, KindOpenAIResponses, KindOpenAIChat, KindGemini, KindSimulated}

// Roles of a message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Stop reasons of an assistant message, as the session's message_end reports them.
const (
	StopEnd     = "stop"
	StopLength  = "length"
	StopToolUse = "toolUse"
	StopError   = "error"
	StopAborted = "aborted"
)

// Stop details a provider may attach to an error stop.
const (
	// DetailRefusal marks a classifier refusal (Anthropic stop_reason "refusal",
	// an OpenAI refusal).
	DetailRefusal = "refusal"
	// DetailSensitive marks a content-filter stop.
	DetailSensitive = "sensitive"
	// DetailInterruptedAfterContent marks a stream that failed after it had
	// already produced observable output.
	DetailInterruptedAfterContent = retry.StopDetailStreamInterrupted
)

// AbortedMessage is the error message of a call cancelled by its context.
const AbortedMessage = retry.GenericAbortSentinel

// Block types.
const (
	BlockText             = "text"
	BlockThinking         = "thinking"
	BlockRedactedThinking = "redacted_thinking"
	BlockToolCall         = "tool_call"
	BlockToolResult       = "tool_result"
)

// Block is one piece of a message's content.
//
// Reasoning state. A thinking block (and a redacted_thinking block) carries,
// besides the text shown to people, the opaque state its provider needs to
// accept it back: Signature and Data (Anthropic), ReasoningID,
// EncryptedContent and Summary (an OpenAI Responses reasoning item). It is
// stored exactly as the provider sent it and sent back, unchanged and in its
// place, only to the kind that issued it; see reasoning.go for stripping it
// (StripReasoning, StripForeignReasoning) and for provenance (Origin).
type Block struct {
	Type string `json:"type"`
	// Text is a text block's text, a thinking block's thinking text (for an
	// OpenAI reasoning item, what streamed of its summary or reasoning text,
	// summary parts separated by a blank line) and a tool result's content.
	Text string `json:"text,omitempty"`
	// Signature is an Anthropic thinking block's signature. A thinking block
	// with a signature is sent back to Anthropic (its text may be empty: a
	// signature-only block); one without is display only.
	Signature string `json:"signature,omitempty"`
	// Data is a redacted_thinking block's opaque data (Anthropic). Histories
	// written before Data existed hold it in Text, which is still read.
	Data string `json:"data,omitempty"`
	// ReasoningID, EncryptedContent and Summary are an OpenAI Responses
	// reasoning item's id, encrypted_content and summary parts (the
	// summary_text texts, in order). A thinking block with both an id and
	// encrypted content is sent back to the Responses API as a reasoning
	// input item.
	ReasoningID      string   `json:"reasoningId,omitempty"`
	EncryptedContent string   `json:"encryptedContent,omitempty"`
	Summary          []string `json:"summary,omitempty"`
	// Tool calls and tool results.
	ToolCallID string          `json:"toolCallId,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	ToolInput  json.RawMessage `json:"toolInput,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	// Origin is where an assistant block came from. Providers leave it
	// empty and never send it; the session fills it (Message.SetOrigin).
	Origin Origin `json:"origin,omitzero"`
}

// Message is one entry of a conversation.
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
	// Assistant messages only.
	Model        string `json:"model,omitempty"`
	StopReason   string `json:"stopReason,omitempty"`
	ErrorMessage string `json:"errorMessage,omitempty"`
	StopDetails  string `json:"stopDetails,omitempty"`
}

// Text returns the concatenated text blocks of m.
func (m *Message) Text() string {
	var s string
	for _, b := range m.Content {
		if b.Type == BlockText {
			s += b.Text
		}
	}
	return s
}

// HasObservableOutput reports whether m holds anything a client has already
// seen stream: a tool call, non-empty text, thinking or redacted thinking.
func (m *Message) HasObservableOutput() bool {
	for _, b := range m.Content {
		switch b.Type {
		case BlockToolCall:
			return true
		case BlockText, BlockThinking:
			if b.Text != "" {
				return true
			}
		case BlockRedactedThinking:
			if b.Text != "" || b.Data != "" {
				return true
			}
		}
	}
	return false
}

// Tool is a client-executed tool the model may call.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// Credential is one secret of a provider. The secret never leaves the
// provider client: not in errors, events, logs or history.
type Credential struct {
	ID     string
	Secret string
	// Account is the account (organisation) the credential belongs to at
	// its provider: the one that reasoning state is bound to. Credentials
	// of one account share it; empty: the credential is an account of its
	// own (see AccountName).
	Account string
	// Owner is the tenant that owns the credential ("bring your own
	// key"); empty for a server credential, which serves every tenant.
	// Providers do not use it: the session keeps what a tenant's own key
	// suffers (its rate limits and quotas) to that tenant.
	Owner string
}

// AccountName is the credential's account: Account, else its ID (a
// credential without an account is an account of its own).
func (c Credential) AccountName() string {
	if c.Account != "" {
		return c.Account
	}
	return c.ID
}

// String never prints the secret.
func (c Credential) String() string { return "credential(" + c.ID + ")" }

// GoString never prints the secret.
func (c Credential) GoString() string {
	return fmt.Sprintf("provider.Credential{ID:%q, Secret:<redacted>, Account:%q}", c.ID, c.Account)
}

// Format makes every fmt verb print String or GoString, never the secret.
func (c Credential) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = f.Write([]byte(c.GoString()))
		return
	}
	_, _ = f.Write([]byte(c.String()))
}

// Request is one model call.
type Request struct {
	// SessionID identifies the calling session, for providers that keep
	// per-session server-side state (OpenAI Responses previous_response_id).
	SessionID string
	Model     string
	System    string
	Messages  []Message // the runtime context, oldest first
	Tools     []Tool
	// Credential to call with; empty for providers that need none.
	Credential Credential
	// Params are the model parameters of the call (zero: the provider's
	// defaults). Check them with ValidateParams before a session accepts
	// them: a provider maps what it is given without checking.
	Params Params
	// Call is the 0-based index of this model call within its prompt
	// (retries and tool-loop turns included). Scripted providers use it to
	// play a fault script attempt by attempt.
	Call int
	// Answered, when set, is called on the calling goroutine once the
	// provider has answered with a stream (status and headers read),
	// before its first event is read: the caller's work that need not
	// lie on the request's way to the provider goes there, into the time
	// the model takes to its first token. A provider may not call it.
	Answered func()
}

// Delta is output that arrived while streaming.
type Delta struct {
	Text     string
	Thinking string
	// ToolCall fragments: the call id and name arrive first, then pieces of
	// its JSON input.
	ToolCallID   string
	ToolName     string
	ToolArgsPart string
}

// Usage counts the tokens of one model call (or, added up, of several).
// The four input-side numbers add up to the whole prompt: InputTokens is
// only the input neither read from nor written to the prompt cache
// (Anthropic's input_tokens; OpenAI's prompt tokens less their cached
// part). ReasoningTokens are the part of OutputTokens spent on reasoning,
// where the provider says (OpenAI); they are billed as output.
type Usage struct {
	InputTokens      int64 `json:"inputTokens,omitempty"`
	OutputTokens     int64 `json:"outputTokens,omitempty"`
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	ReasoningTokens  int64 `json:"reasoningTokens,omitempty"`
}

// Add adds v to u.
func (u *Usage) Add(v Usage) {
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
	u.CacheReadTokens += v.CacheReadTokens
	u.CacheWriteTokens += v.CacheWriteTokens
	u.ReasoningTokens += v.ReasoningTokens
}

// IsZero reports whether u counts no token.
func (u Usage) IsZero() bool { return u == Usage{} }

// PromptTokens is the whole prompt: input, cache read and cache write.
func (u Usage) PromptTokens() int64 { return u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens }

// Total is every token the call read or wrote (reasoning is part of output).
func (u Usage) Total() int64 { return u.PromptTokens() + u.OutputTokens }

// Failure is what a provider knows about a failed call, beyond the message
// text: what the retry engine needs to classify it.
type Failure struct {
	Status  int         // HTTP status, 0 when the call failed before one arrived
	Headers http.Header // response headers, when a response arrived
	Type    string      // provider error.type, e.g. "overloaded_error"
	Code    string      // provider error.code, e.g. "insufficient_quota"
	// Body is the provider's error body (or error event) as it came, at
	// most 64 KiB, secrets redacted: the structured hints the retry engine
	// reads (Google's RetryInfo and QuotaFailure details, OpenRouter's
	// error.metadata). Empty when none arrived.
	Body string
}

// Result is the end of one model call.
type Result struct {
	// Message is the assistant message, with StopReason, ErrorMessage and
	// StopDetails set. On failure its content holds what was streamed before
	// the failure (completed tool calls only).
	Message Message
	// Failure is set when Message.StopReason is StopError and the provider
	// knows more than the message text.
	Failure *Failure
	Usage   Usage
	// ResetState is set when the provider dropped cached server-side state
	// (e.g. an OpenAI Responses previous_response_id) so the next call sends
	// the full history.
	ResetState bool
	// RateLimit holds the rate-limit headers (anthropic-ratelimit-*,
	// x-ratelimit-*) of a response that did not fail, when it had some: the
	// session paces its credential from them.
	RateLimit http.Header
}

// Provider streams one model call at a time. Stream must return when ctx is
// done (StopReason StopAborted, ErrorMessage AbortedMessage), must call
// onDelta from the calling goroutine only, and never returns an error: every
// failure is a Result with StopReason StopError.
type Provider interface {
	Stream(ctx context.Context, req *Request, onDelta func(Delta)) Result
}

// Forgetter is implemented by providers that keep per-session state (an
// OpenAI Responses chain); the session engine calls Forget when a session is
// deleted.
type Forgetter interface {
	Forget(sessionID string)
}

// HTTPErrorMessage formats a provider's error answer the way every agentd
// provider client reports it: status, error type and the provider's own
// wording, so that text classification sees the provider's words.
func HTTPErrorMessage(status int, errType, message string) string {
	switch {
	case errType != "" && message != "":
		return fmt.Sprintf("%d %s: %s", status, errType, message)
	case message != "":
		return fmt.Sprintf("%d %s", status, message)
	case errType != "":
		return fmt.Sprintf("%d %s", status, errType)
	default:
		return fmt.Sprintf("%d %s", status, http.StatusText(status))
	}
}
