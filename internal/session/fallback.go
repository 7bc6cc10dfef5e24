package session

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
)

// Cooldowns is the model cooldown registry the fallback chains consult. It
// is shared by every session (and, with a shared store, every replica).
type Cooldowns interface {
	// Suppress puts model (provider/model) in cooldown until until.
	Suppress(ctx context.Context, model string, until time.Time) error
	// SuppressedUntil is the end of model's cooldown, zero when none.
	SuppressedUntil(ctx context.Context, model string) (time.Time, error)
}

// DefaultFallbackCooldown is the cooldown of a failing model when neither
// the provider's hint nor the error's wording says more (reference: 5 min
// for an unknown reason).
const DefaultFallbackCooldown = 5 * time.Minute

// activeFallback is the fallback in effect (docs/retry-policy.md §4): the
// session runs on a fallback model of role's chain instead of original.
type activeFallback struct {
	role     string
	original string
	// pinned: applied for a classifier refusal; never reverted.
	pinned bool
}

// chainFor returns role's effective fallback chain: the primary followed by
// the configured entries, without duplicates. A role without a chain of its
// own inherits the default chain.
func chainFor(settings retry.Settings, role, primary string) []string {
	entries, ok := settings.FallbackChains[role]
	if !ok {
		entries = settings.FallbackChains["default"]
	}
	chain := []string{primary}
	for _, e := range entries {
		if !slices.Contains(chain, e) {
			chain = append(chain, e)
		}
	}
	return chain
}

// serverKeysSuffix makes the registry name of the server's keys' cooldown
// of a model (serverKeysName).
const serverKeysSuffix = "|server-keys"

// serverKeysName is the cooldown registry's name for model as the server's
// keys reach it: a rate limit or quota met on one of them cools this name,
// not the model's, so that the sessions calling the model with their
// tenant's own keys stay on it.
func serverKeysName(model string) string { return model + serverKeysSuffix }

// CooldownModel is the model a cooldown registry name is of: the name
// itself, or the model of its server's keys' cooldown.
func CooldownModel(name string) string { return strings.TrimSuffix(name, serverKeysSuffix) }

// cooldownNames are the registry names the session heeds for model: the
// model's, and its server's keys' unless the session's last call to the
// model's provider used a key of its tenant's own.
func (s *Session) cooldownNames(model string) []string {
	providerName, _, _ := strings.Cut(model, "/")
	s.mu.Lock()
	own := s.ownKeys[providerName]
	s.mu.Unlock()
	if own {
		return []string{model}
	}
	return []string{model, serverKeysName(model)}
}

// suppressed reports whether model is cooling down now, for every tenant
// (its own cooldown, or its server's keys' for a session that calls them),
// or for the session's own after its key's failure — or, with a registry
// that probes (Prober), whether its probe is someone else's: a false
// answer may make this session the model's probe.
func (s *Session) suppressed(ctx context.Context, model string) bool {
	if s.m.ownCooldowns.cooling(s.tenant, model, s.m.opts.Now()) {
		return true
	}
	if s.m.opts.Cooldowns == nil {
		return false
	}
	names := s.cooldownNames(model)
	if p, ok := s.m.opts.Cooldowns.(Prober); ok {
		return s.admit(ctx, p, model, names)
	}
	for _, name := range names {
		until, err := s.m.opts.Cooldowns.SuppressedUntil(ctx, name)
		if err != nil {
			s.m.log.Warn("cooldown registry unavailable", "session", s.id, "err", err)
			return false
		}
		if !until.IsZero() {
			return true
		}
	}
	return false
}

// faultScope is whose a failed call's fault is, for the cooldown it
// leaves (tryFallback).
type faultScope int

const (
	scopeModel      faultScope = iota // the model's: every session's cooldown
	scopeTenant                       // the tenant's own key's (turn.private): its sessions', on this replica
	scopeServerKeys                   // the server's keys' (turn.serverKeys): the sessions calling them
)

// scope is the turn's faultScope.
func (t *turn) scope() faultScope {
	switch {
	case t.private():
		return scopeTenant
	case t.serverKeys():
		return scopeServerKeys
	}
	return scopeModel
}

// tryFallback is step 8 of the retry flow: put the current model in
// cooldown (not for refusals; for a private failure, the tenant's own
// key's (turn.private), in that tenant's cooldowns only; for one of the
// server's keys' (turn.serverKeys), under the server's keys' name) and
// switch to the next model of the chain that is not cooling down. It
// reports whether a fallback was applied.
func (s *Session) tryFallback(ctx context.Context, promptID string, settings retry.Settings, v retry.Verdict, scope faultScope) bool {
	s.mu.Lock()
	current, role, primary := s.model, s.role, s.primary
	if s.fallback != nil {
		role, primary = s.fallback.role, s.fallback.original
	}
	s.mu.Unlock()

	refusal := v.Class == retry.ClassRefusal
	switch {
	case refusal:
	case scope == scopeTenant:
		now, cooldown := s.m.opts.Now(), s.cooldownFor(v)
		s.m.ownCooldowns.cool(s.tenant, current, now.Add(cooldown), now)
		s.m.log.Info("the tenant's own key is limited: the model cools for the tenant's sessions only",
			"session", s.id, "model", current, "cooldown", cooldown)
	case s.m.opts.Cooldowns != nil:
		name, cooldown := current, s.cooldownFor(v)
		if scope == scopeServerKeys {
			name = serverKeysName(current)
			s.m.log.Info("a server key is limited: the model cools for the sessions on the server's keys",
				"session", s.id, "model", current, "cooldown", cooldown)
		}
		if err := s.m.opts.Cooldowns.Suppress(ctx, name, s.m.opts.Now().Add(cooldown)); err != nil {
			s.m.log.Warn("cooldown not recorded", "session", s.id, "model", current, "err", err)
		}
	}

	chain := chainFor(settings, role, primary)
	if len(chain) <= 1 {
		return false
	}
	pos := slices.Index(chain, current)
	if pos < 0 {
		pos = 0
	}
	s.mu.Lock()
	n := s.needsLocked()
	s.mu.Unlock()
	for _, candidate := range chain[pos+1:] {
		if candidate == current || s.skipIncapable(candidate, n) || s.suppressed(ctx, candidate) {
			continue
		}
		s.mu.Lock()
		if s.fallback == nil {
			s.fallback = &activeFallback{role: role, original: current}
		}
		if refusal {
			s.fallback.pinned = true
		}
		s.emit(Event{Type: EventRetryFallbackApplied, PromptID: promptID, From: current, To: candidate, Role: role})
		s.m.opts.Observer.FallbackApplied(role)
		s.switchModelLocked(ctx, promptID, current, candidate, ChangeFallback)
		s.mu.Unlock()
		return true
	}
	return false
}

// maybeRevert is the revert of docs/retry-policy.md §4: before a
// prompt and before every continuation, a session on a fallback model goes
// back to its primary once the primary's cooldown has expired (policy
// cooldown-expiry; never with policy never or a pinned fallback).
func (s *Session) maybeRevert(ctx context.Context, promptID string) {
	s.mu.Lock()
	fb := s.fallback
	reverts := s.settings.RevertsOnCooldownExpiry()
	current := s.model
	s.mu.Unlock()
	if fb == nil || fb.pinned || !reverts {
		return
	}
	if s.suppressed(ctx, fb.original) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fallback != fb {
		return
	}
	if current != fb.original {
		s.switchModelLocked(ctx, promptID, current, fb.original, ChangeRevert)
		s.m.opts.Observer.FallbackReverted(fb.role)
	}
	s.fallback = nil
}

// Reasons of a model_change.
const (
	ChangeFallback = "fallback" // the retry flow fell back to the chain's next model
	ChangeRevert   = "revert"   // back to the primary, its cooldown expired
	ChangeCooldown = "cooldown" // a prompt started on a model cooling down: on the chain's first that is not
)

// avoidCooldown runs when a prompt starts (after maybeRevert): a session
// whose model is cooling down starts on the first model of its fallback
// chain that is not, with model fallback enabled. The fallback is then
// active, so maybeRevert brings the primary back once its cooldown has
// expired. When every model of the chain is cooling, the model stays.
func (s *Session) avoidCooldown(ctx context.Context, promptID string) {
	if s.m.opts.Cooldowns == nil {
		return
	}
	s.mu.Lock()
	settings, current, role, primary := s.settings, s.model, s.role, s.primary
	fb := s.fallback
	if fb != nil {
		role, primary = fb.role, fb.original
	}
	s.mu.Unlock()
	if !settings.ModelFallback {
		return
	}
	chain := chainFor(settings, role, primary)
	if len(chain) <= 1 || !s.suppressed(ctx, current) {
		return
	}
	s.mu.Lock()
	n := s.needsLocked()
	s.mu.Unlock()
	for _, candidate := range chain {
		if candidate == current || s.skipIncapable(candidate, n) || s.suppressed(ctx, candidate) {
			continue
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.model != current || s.fallback != fb {
			return // changed meanwhile
		}
		if s.fallback == nil {
			s.fallback = &activeFallback{role: role, original: current}
		}
		s.m.log.Info("model cooling down: the prompt starts on a fallback", "session", s.id,
			"model", current, "to", candidate, "role", role)
		s.switchModelLocked(ctx, promptID, current, candidate, ChangeCooldown)
		return
	}
}

// switchModelLocked switches the session's model: a model_change entry in
// the history and a model_change event.
func (s *Session) switchModelLocked(ctx context.Context, promptID, from, to, reason string) {
	s.model = to
	mc := &ModelChange{From: from, To: to, Reason: reason}
	if _, err := s.persistLocked(ctx, promptID, provider.Message{Role: RoleModelChange}, mc); err != nil {
		s.m.log.Error("persist model change", "session", s.id, "err", err)
	}
	s.emit(Event{Type: EventModelChange, PromptID: promptID, From: from, To: to, Reason: reason, CacheLost: s.modelCacheLostLocked(to)})
}
