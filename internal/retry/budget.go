package retry

import (
	"errors"
	"fmt"
	"math"
)

// Budget is retry.budget, a retry budget in the manner of gRFC A6 (gRPC's
// retry throttling), kept per provider/model: the budget starts full at
// MaxTokens; a retry of a failed call is allowed while the budget holds
// more than MaxTokens/2 tokens, and spends one; every successful call adds
// TokenRatio, up to MaxTokens. Once a model's calls fail faster than they
// succeed, retries stop until successes refill it: an outage cannot be
// amplified past about MaxTokens/2 retries (plus TokenRatio per success).
//
// Levels are counted in thousandths of a token (BudgetScale), so that the
// arithmetic is exact wherever it runs (Go, or a Lua script in Redis):
// TokenRatio is rounded to three decimals, as gRFC A6 does.
type Budget struct {
	MaxTokens  int     // retry.budget.max_tokens; 0: no budget
	TokenRatio float64 // retry.budget.token_ratio
}

// BudgetScale is the number of budget units in one token.
const BudgetScale = 1000

// Limits of retry.budget (those of gRFC A6).
const (
	MaxBudgetTokens     = 1000 // the largest max_tokens
	DefaultBudgetRatio  = 0.1  // token_ratio when the configuration gives none
	minBudgetRatioUnits = 1    // token_ratio >= 0.001
)

// Enabled reports whether the budget is in force.
func (b Budget) Enabled() bool { return b.MaxTokens > 0 }

// Full is a full budget's level, in units.
func (b Budget) Full() int64 { return int64(b.MaxTokens) * BudgetScale }

// Credit is what one successful call adds, in units.
func (b Budget) Credit() int64 { return int64(math.Round(b.TokenRatio * BudgetScale)) }

// Threshold is the level, in units, a retry needs to be above.
func (b Budget) Threshold() int64 { return b.Full() / 2 }

// Spend decides a retry at level (units): allowed while level is above the
// threshold, and then one token less.
func (b Budget) Spend(level int64) (after int64, allowed bool) {
	if level > b.Threshold() {
		return level - BudgetScale, true
	}
	return level, false
}

// Add is level after successes successful calls, never above Full.
func (b Budget) Add(level, successes int64) int64 {
	return min(b.Full(), level+successes*b.Credit())
}

// Tokens converts a level in units to tokens.
func Tokens(level int64) float64 { return float64(level) / BudgetScale }

// Validate checks a budget that is set: max_tokens in [1, 1000], token_ratio
// in [0.001, max_tokens] (three decimals). Errors are *FieldError naming
// retry.budget.max_tokens or retry.budget.token_ratio.
func (b Budget) Validate() error {
	var errs []error
	if b.MaxTokens < 1 || b.MaxTokens > MaxBudgetTokens {
		errs = append(errs, &FieldError{Field: "retry.budget.max_tokens", Msg: fmt.Sprintf("must be in [1, %d], got %d", MaxBudgetTokens, b.MaxTokens)})
	}
	if math.IsNaN(b.TokenRatio) || b.Credit() < minBudgetRatioUnits || (b.MaxTokens > 0 && b.TokenRatio > float64(b.MaxTokens)) {
		errs = append(errs, &FieldError{Field: "retry.budget.token_ratio", Msg: fmt.Sprintf("must be in [0.001, max_tokens], got %v", b.TokenRatio)})
	}
	return errors.Join(errs...)
}
