package session

import (
	"fmt"
	"time"
)

// Limits bound what one tenant, and one request, may ask of the engine
// (the configuration's limits section). A zero field takes its value of
// DefaultLimits. With a shared store the per-tenant bounds hold across every
// replica: the store counts the tenant's sessions and running prompts.
type Limits struct {
	// MaxSessionsPerTenant bounds the sessions one tenant holds
	// (limits.max_sessions_per_tenant).
	MaxSessionsPerTenant int
	// MaxConcurrentPromptsPerTenant bounds the prompts of one tenant under
	// way at once, from their start to their prompt_end, retry backoffs
	// included (limits.max_concurrent_prompts_per_tenant).
	MaxConcurrentPromptsPerTenant int
	// MaxTools bounds the tools of a session (limits.max_tools).
	MaxTools int
	// MaxSystemPromptBytes bounds a session's system prompt
	// (limits.max_system_prompt_bytes).
	MaxSystemPromptBytes int
	// MinBaseDelay is the least retry.base_delay_ms a session's overrides
	// may ask for (limits.min_base_delay_ms).
	MinBaseDelay time.Duration
	// MaxRetriesCap is the most retry.max_retries a session's overrides
	// may ask for (limits.max_retries_cap).
	MaxRetriesCap int
	// MaxHistoryBytes bounds a session's persisted history: a prompt to a
	// session whose history holds this much (by entrySize) is refused
	// (limits.max_history_bytes).
	MaxHistoryBytes int64
}

// DefaultLimits are the limits of a zero Limits field: the configuration's
// defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxSessionsPerTenant:          1000,
		MaxConcurrentPromptsPerTenant: 256,
		MaxTools:                      128,
		MaxSystemPromptBytes:          256 << 10,
		MinBaseDelay:                  100 * time.Millisecond,
		MaxRetriesCap:                 20,
		MaxHistoryBytes:               64 << 20,
	}
}

// withDefaults fills in the zero fields.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	def := func(v *int, dv int) {
		if *v <= 0 {
			*v = dv
		}
	}
	def(&l.MaxSessionsPerTenant, d.MaxSessionsPerTenant)
	def(&l.MaxConcurrentPromptsPerTenant, d.MaxConcurrentPromptsPerTenant)
	def(&l.MaxTools, d.MaxTools)
	def(&l.MaxSystemPromptBytes, d.MaxSystemPromptBytes)
	def(&l.MaxRetriesCap, d.MaxRetriesCap)
	if l.MaxHistoryBytes <= 0 {
		l.MaxHistoryBytes = d.MaxHistoryBytes
	}
	if l.MinBaseDelay <= 0 {
		l.MinBaseDelay = d.MinBaseDelay
	}
	return l
}

// Names of the limits, as the configuration spells them: the errors of a
// limit name it.
const (
	LimitSessionsPerTenant = "limits.max_sessions_per_tenant"
	LimitPromptsPerTenant  = "limits.max_concurrent_prompts_per_tenant"
	LimitTools             = "limits.max_tools"
	LimitSystemPromptBytes = "limits.max_system_prompt_bytes"
	LimitMinBaseDelay      = "limits.min_base_delay_ms"
	LimitMaxRetriesCap     = "limits.max_retries_cap"
	LimitHistoryBytes      = "limits.max_history_bytes"
)

// LimitError is a tenant at one of its limits: errors.Is(err, ErrLimit)
// holds (the server's RESOURCE_EXHAUSTED). Limit names it as the
// configuration does.
type LimitError struct {
	Limit string
	Msg   string
}

func (e *LimitError) Error() string { return e.Limit + ": " + e.Msg }

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

func sessionsLimitError(n int) error {
	return &LimitError{Limit: LimitSessionsPerTenant,
		Msg: fmt.Sprintf("tenant has %d sessions, the limit; delete one before creating another", n)}
}

func promptsLimitError(n int) error {
	return &LimitError{Limit: LimitPromptsPerTenant,
		Msg: fmt.Sprintf("tenant has %d prompts running, the limit; wait for one's prompt_end", n)}
}

// historyFullLocked is the limit error of a session whose history holds
// limits.max_history_bytes (by entrySize), nil below it.
func (s *Session) historyFullLocked() error {
	limit := s.m.opts.Limits.MaxHistoryBytes
	if s.histBytes < limit {
		return nil
	}
	return &LimitError{Limit: LimitHistoryBytes,
		Msg: fmt.Sprintf("the session's history holds %d bytes, the limit is %d; start a new session", s.histBytes, limit)}
}

// checkRetryCaps bounds a session's retry overrides.
func (l Limits) checkRetryCaps(o RetryOverrides) error {
	if o.BaseDelay != nil && *o.BaseDelay < l.MinBaseDelay {
		return invalid("retry.base_delay_ms", "%d is below %s (%d)", o.BaseDelay.Milliseconds(), LimitMinBaseDelay, l.MinBaseDelay.Milliseconds())
	}
	if o.MaxRetries != nil && *o.MaxRetries > l.MaxRetriesCap {
		return invalid("retry.max_retries", "%d is above %s (%d)", *o.MaxRetries, LimitMaxRetriesCap, l.MaxRetriesCap)
	}
	return nil
}
