package session

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
)

// Prober is implemented by a cooldown registry with half-open probing:
// once a model's cooldown has ended, one caller at a time — across every
// replica with the Redis registry — calls it as a probe, and the others
// keep treating it as cooling until a probe succeeds.
type Prober interface {
	// Admit answers whether a model may be called now, and whether this
	// call is a probe: names are the registry's names the call depends on
	// (the model's, and its server's keys' for a session that calls them);
	// a probe is of one of them (Admission.Name).
	Admit(ctx context.Context, names ...string) (Admission, error)
	// Settle ends the probe token of model with outcome (ProbeSuccess,
	// ProbeFailure, ProbeReleased); a failure cools the model down again,
	// for cooldown doubled per failed probe.
	Settle(ctx context.Context, model, token, outcome string, cooldown time.Duration) error
}

// Admission is a Prober's answer.
type Admission struct {
	Allowed bool
	Probe   bool
	Token   string
	Name    string // the name the probe is of
}

// Probe outcomes.
const (
	ProbeSuccess  = "success"
	ProbeFailure  = "failure"
	ProbeReleased = "released"
)

// heldProbe is the probe a session holds: its next call to model settles
// it. name is the registry's name it is of: the model's, or its server's
// keys' (serverKeysName).
type heldProbe struct {
	model, name, token string
}

// admit is suppressed's question for a registry with probes: it claims the
// probe when the model's turn has come, and reports whether the model is
// to be avoided. names are the registry names the session heeds for model
// (cooldownNames).
func (s *Session) admit(ctx context.Context, p Prober, model string, names []string) (avoid bool) {
	s.mu.Lock()
	held := s.probe
	s.mu.Unlock()
	if held.model == model {
		return false // this session's probe: its next call
	}
	a, err := p.Admit(ctx, names...)
	if err != nil {
		s.m.log.Warn("cooldown registry unavailable", "session", s.id, "err", err)
		return false
	}
	if a.Probe {
		name := a.Name
		if name == "" {
			name = model
		}
		s.m.log.Info("cooldown over: this session's call probes the model", "session", s.id, "model", model, "cooldown", name)
		s.mu.Lock()
		old := s.probe
		s.probe = heldProbe{model: model, name: name, token: a.Token}
		s.mu.Unlock()
		if old.model != "" {
			s.settle(old, ProbeReleased, 0)
		}
	}
	return !a.Allowed
}

// settle ends a held probe (it runs whatever the run's context).
func (s *Session) settle(h heldProbe, outcome string, cooldown time.Duration) {
	p, ok := s.m.opts.Cooldowns.(Prober)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.m.leaseTTL())
	defer cancel()
	if err := p.Settle(ctx, h.name, h.token, outcome, cooldown); err != nil {
		s.m.log.Warn("probe not settled (its claim expires)", "session", s.id, "model", h.model, "err", err)
	}
	s.m.log.Info("probe settled", "session", s.id, "model", h.model, "cooldown", h.name, "outcome", outcome)
}

// settleProbeCall settles the session's probe when the call to model that
// just ended was it: a success closes the circuit, a retryable failure
// (transient) of what the probe is of — the model's, or the server's keys'
// for their probe — cools it down again for longer, and anything else — an
// abort, a non-retryable error, a usage limit of the credential, a rate
// limit of the tenant's own key, a failure of the other scope, an overflow
// — proves nothing and releases it.
func (s *Session) settleProbeCall(model string, t *turn) {
	s.mu.Lock()
	h := s.probe
	if h.model != model {
		s.mu.Unlock()
		return
	}
	s.probe = heldProbe{}
	s.mu.Unlock()
	outcome, cooldown := ProbeReleased, time.Duration(0)
	switch t.Message.StopReason {
	case provider.StopError:
		if t.verdict.Class == retry.ClassTransient && !t.private() && t.serverKeys() == (h.name != h.model) {
			outcome, cooldown = ProbeFailure, s.cooldownFor(t.verdict)
		}
	case provider.StopAborted:
	default:
		outcome = ProbeSuccess
	}
	s.settle(h, outcome, cooldown)
}

// releaseProbe gives back a probe the run claimed and never made (every
// exit path of a run).
func (s *Session) releaseProbe() {
	s.mu.Lock()
	h := s.probe
	s.probe = heldProbe{}
	s.mu.Unlock()
	if h.model != "" {
		s.settle(h, ProbeReleased, 0)
	}
}

// cooldownFor is the cooldown of a model that failed with v: the hint, the
// configured fallback cooldown, the wording's estimate, else
// DefaultFallbackCooldown.
func (s *Session) cooldownFor(v retry.Verdict) time.Duration {
	cooldown := v.Cooldown
	if !v.HasHint && s.m.opts.FallbackCooldown > 0 {
		cooldown = s.m.opts.FallbackCooldown
	}
	if cooldown <= 0 {
		cooldown = DefaultFallbackCooldown
	}
	return cooldown
}
