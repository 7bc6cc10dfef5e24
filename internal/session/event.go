package session

import (
	"encoding/json"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// Event types (the retry events are those of docs/retry-policy.md §5).
const (
	EventAgentStart             = "agent_start"
	EventMessageStart           = "message_start"
	EventMessageUpdate          = "message_update"
	EventMessageEnd             = "message_end"
	EventToolCall               = "tool_call"
	EventAgentEnd               = "agent_end"
	EventAutoRetryStart         = "auto_retry_start"
	EventAutoRetryEnd           = "auto_retry_end"
	EventRetryFallbackApplied   = "retry_fallback_applied"
	EventRetryFallbackSucceeded = "retry_fallback_succeeded"
	EventModelChange            = "model_change"
	EventCredentialSwitched     = "credential_switched"
	EventContextOverflow        = "context_overflow"
	EventPromptEnd              = "prompt_end"
)

// Prompt outcomes, as prompt_end reports them.
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
	OutcomeAborted   = "aborted"
)

// Event is one thing a session emitted. Type says which of the field groups
// below is meaningful; the server maps it onto the API's Event message.
type Event struct {
	SessionID string
	Seq       uint64
	Time      time.Time
	Type      string
	PromptID  string

	// message_start, message_end, retry_fallback_succeeded.
	Role  string
	Model string
	// message_start: the credential id the call uses.
	Credential string
	// message_update.
	TextDelta     string
	ThinkingDelta string
	ToolCallDelta *ToolCallDelta
	// message_end.
	StopReason   string
	ErrorMessage string // also auto_retry_start, context_overflow
	StopDetails  string
	Text         string
	ErrorClass   string // also auto_retry_start
	// tool_call.
	ToolCall *ToolCall
	// auto_retry_start, auto_retry_end.
	Attempt     int
	MaxAttempts int
	Delay       time.Duration
	DelaySource string
	Success     bool
	FinalError  string
	// retry_fallback_applied, model_change, credential_switched.
	From     string
	To       string
	Reason   string
	Provider string
	// model_change, credential_switched: the switch moved the session off
	// the prompt cache it had.
	CacheLost bool
	// prompt_end.
	Outcome string
	Error   string

	// message_end: the call's usage (always set, zero when the provider
	// reported none). prompt_end: every model call of the prompt, failed
	// attempts included; RetryUsage is the part of it spent on attempts a
	// retry or fallback threw away. CostUSD and RetryCostUSD are their cost
	// in USD, nil when the catalog prices none of the calls.
	Usage        *provider.Usage
	CostUSD      *float64
	RetryUsage   *provider.Usage
	RetryCostUSD *float64
}

// ToolCallDelta is a fragment of a tool call as it forms.
type ToolCallDelta struct {
	CallID     string
	Name       string
	InputDelta string
}

// ToolCall is a complete tool call the client must execute.
type ToolCall struct {
	CallID string
	Name   string
	Input  json.RawMessage
}
