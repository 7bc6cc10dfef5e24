package retry

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Fallback revert policies (retry.fallback_revert_policy).
const (
	// RevertCooldownExpiry restores the primary model, lazily at the next
	// prompt or continuation, once its cooldown has expired.
	RevertCooldownExpiry = "cooldown-expiry"
	// RevertNever keeps a fallback model for the rest of the conversation.
	RevertNever = "never"
)

// Settings is the retry policy's settings group (config file "retry:", and
// per-session overrides).
type Settings struct {
	Enabled    bool          // retry.enabled
	MaxRetries int           // retry.max_retries
	BaseDelay  time.Duration // retry.base_delay_ms
	// MaxDelay is retry.max_delay_ms, the fail-fast cap on a planned delay;
	// <= 0 disables it.
	MaxDelay      time.Duration
	ModelFallback bool // retry.model_fallback
	// FallbackChains is retry.fallback_chains: role -> ["provider/model", ...].
	// A "default" chain applies to every role without a chain of its own.
	FallbackChains map[string][]string
	// FallbackRevertPolicy is retry.fallback_revert_policy: RevertCooldownExpiry
	// (the default; "" means the same) or RevertNever.
	FallbackRevertPolicy string
	// OverflowFallback is retry.overflow_fallback: on a context overflow,
	// switch to the next model of the chain whose catalog context window is
	// larger (config only; default off).
	OverflowFallback bool
}

// Overrides are settings to change, nil (or a nil map) for each to keep:
// the configuration file's over the defaults, a session's over the
// server's. Settings.With applies them: the one place settings merge.
type Overrides struct {
	Enabled              *bool
	MaxRetries           *int
	BaseDelay            *time.Duration
	MaxDelay             *time.Duration
	ModelFallback        *bool
	FallbackChains       map[string][]string
	FallbackRevertPolicy *string
}

// With returns s with o's settings applied (not validated: see Validate).
func (s Settings) With(o Overrides) Settings {
	if o.Enabled != nil {
		s.Enabled = *o.Enabled
	}
	if o.MaxRetries != nil {
		s.MaxRetries = *o.MaxRetries
	}
	if o.BaseDelay != nil {
		s.BaseDelay = *o.BaseDelay
	}
	if o.MaxDelay != nil {
		s.MaxDelay = *o.MaxDelay
	}
	if o.ModelFallback != nil {
		s.ModelFallback = *o.ModelFallback
	}
	if o.FallbackChains != nil {
		s.FallbackChains = o.FallbackChains
	}
	if o.FallbackRevertPolicy != nil {
		s.FallbackRevertPolicy = *o.FallbackRevertPolicy
	}
	return s
}

// DefaultSettings returns the retry policy's defaults: enabled, 10
// retries, 500 ms base delay, 300000 ms (5 min) max delay, model fallback on,
// no chains, revert on cooldown expiry.
func DefaultSettings() Settings {
	return Settings{
		Enabled:              true,
		MaxRetries:           10,
		BaseDelay:            500 * time.Millisecond,
		MaxDelay:             300000 * time.Millisecond,
		ModelFallback:        true,
		FallbackChains:       nil,
		FallbackRevertPolicy: RevertCooldownExpiry,
	}
}

// Exhausted reports whether attempt (1-based, counted after the increment of
// Flow step 3) is past retry.max_retries (Flow step 5): the chain ends with
// auto_retry_end{success:false, attempt: attempt-1}.
func (s Settings) Exhausted(attempt int) bool { return attempt > s.MaxRetries }

// RevertsOnCooldownExpiry reports whether a fallback model is restored to the
// primary once the primary's cooldown expires (any policy but "never").
func (s Settings) RevertsOnCooldownExpiry() bool { return s.FallbackRevertPolicy != RevertNever }

// ErrInvalidSettings is matched (errors.Is) by every error of
// Settings.Validate.
var ErrInvalidSettings = errors.New("invalid retry settings")

// FieldError is one invalid retry setting. Field is the config key
// ("retry.max_retries", "retry.fallback_chains.default[1]").
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "<field> <msg>", e.g. "retry.max_retries must be >= 0, got -1".
func (e *FieldError) Error() string { return e.Field + " " + e.Msg }

// Is makes errors.Is(err, ErrInvalidSettings) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidSettings }

// Validate checks the settings and returns every problem (joined with
// errors.Join), each a *FieldError naming the config key:
//
//   - retry.max_retries must be >= 0;
//   - retry.base_delay_ms must be >= 0;
//   - retry.max_delay_ms may be anything (<= 0 disables the cap);
//   - retry.fallback_revert_policy must be "cooldown-expiry", "never" or
//     empty (the default);
//   - retry.fallback_chains: role names non-empty, every entry of the form
//     "provider/model" with both parts non-empty and no spaces. Whether the
//     provider exists is the config loader's check.
func (s Settings) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if s.MaxRetries < 0 {
		add("retry.max_retries", "must be >= 0, got %d", s.MaxRetries)
	}
	if s.BaseDelay < 0 {
		add("retry.base_delay_ms", "must be >= 0, got %d", s.BaseDelay.Milliseconds())
	}
	switch s.FallbackRevertPolicy {
	case "", RevertCooldownExpiry, RevertNever:
	default:
		add("retry.fallback_revert_policy", "must be %q or %q, got %q", RevertCooldownExpiry, RevertNever, s.FallbackRevertPolicy)
	}
	roles := make([]string, 0, len(s.FallbackChains))
	for role := range s.FallbackChains {
		roles = append(roles, role)
	}
	sort.Strings(roles)
	for _, role := range roles {
		if strings.TrimSpace(role) == "" {
			add("retry.fallback_chains", "has an empty role name")
			continue
		}
		for i, sel := range s.FallbackChains[role] {
			if !validSelector(sel) {
				add(fmt.Sprintf("retry.fallback_chains.%s[%d]", role, i), "must be \"provider/model\", got %q", sel)
			}
		}
	}
	return errors.Join(errs...)
}

// validSelector reports whether sel looks like "provider/model" (the model
// part may carry further slashes, ":thinking" and "@route").
func validSelector(sel string) bool {
	if strings.ContainsAny(sel, " \t\r\n") {
		return false
	}
	provider, model, ok := strings.Cut(sel, "/")
	return ok && provider != "" && model != "" && model != "/"
}
