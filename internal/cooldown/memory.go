// Package cooldown keeps the model cooldown registry of the retry engine's
// model fallback (docs/retry-policy.md §4 and §5 step 8: "suppress the
// current model selector for cooldown"). A model in cooldown is skipped as a
// fallback candidate, and a session on a fallback model returns to its
// primary once the primary's cooldown has expired. The registry is shared
// by every session of the process, so one session's failures spare the
// others the same failing model.
package cooldown

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// Memory is the in-process registry.
type Memory struct {
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time // provider/model -> end of cooldown
	// circuit holds the models whose cooldown has not been closed by a
	// successful probe, with their failed probes.
	circuit  map[string]int
	probes   map[string]probeClaim
	seq      uint64
	probeTTL time.Duration
}

// NewMemory returns an empty registry; now is its clock (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, until: map[string]time.Time{}, circuit: map[string]int{}, probes: map[string]probeClaim{}, probeTTL: DefaultProbeTTL}
}

// Suppress puts model in cooldown until until. A longer cooldown already in
// force is kept.
func (m *Memory) Suppress(_ context.Context, model string, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.until[model]; !ok || until.After(cur) {
		m.until[model] = until
	}
	if _, ok := m.circuit[model]; !ok {
		m.circuit[model] = 0 // opened: a probe closes it after the cooldown
	}
	m.gcLocked()
	return nil
}

// SuppressedUntil returns the end of model's cooldown, or the zero time when
// it is not cooling down.
func (m *Memory) SuppressedUntil(_ context.Context, model string) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.until[model]
	if !ok || !u.After(m.now()) {
		return time.Time{}, nil
	}
	return u, nil
}

// Active returns every model cooling down now and the end of its cooldown.
func (m *Memory) Active(context.Context) (map[string]time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gcLocked()
	out := make(map[string]time.Time, len(m.until))
	for k, v := range m.until {
		out[k] = v
	}
	return out, nil
}

// gcLocked drops expired entries.
func (m *Memory) gcLocked() {
	now := m.now()
	for k, v := range m.until {
		if !v.After(now) {
			delete(m.until, k)
		}
	}
}

// Probe outcomes (Settle), as agentd_model_probes_total counts them.
const (
	ProbeSuccess  = "success"  // the probe call succeeded: the circuit closes
	ProbeFailure  = "failure"  // it failed retryably: a longer cooldown
	ProbeReleased = "released" // it proved nothing (cancelled, a non-retryable error, never made): the next caller may probe
)

// ProbeOutcomes lists them.
var ProbeOutcomes = []string{ProbeSuccess, ProbeFailure, ProbeReleased}

// DefaultProbeTTL bounds a probe claim: a replica that dies mid-probe frees
// it after this long.
const DefaultProbeTTL = time.Minute

// MaxProbeCooldown caps the cooldown after failed probes (each failure
// doubles it).
const MaxProbeCooldown = 30 * time.Minute

// Admission is the registry's answer to a caller about to use a model.
type Admission struct {
	// Allowed: the model may be called. False while it cools down, and
	// while another caller holds its probe.
	Allowed bool
	// Probe: this caller's call is the model's probe after its cooldown
	// (Allowed too); it must Settle it with Token.
	Probe bool
	Token string
	// Name is the name the probe is of (one of Admit's names).
	Name string
}

// probeClaim is a held probe.
type probeClaim struct {
	token string
	until time.Time
}

// Admit answers whether a model may be called now, the model known to the
// registry by names (its own name, and any other its call depends on):
// not while any of them cools down; once their cooldowns have ended, only
// one caller at a time — the probe of the first whose circuit is open —
// until a probe settles as a success.
func (m *Memory) Admit(_ context.Context, names ...string) (Admission, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for _, name := range names {
		if u, ok := m.until[name]; ok && u.After(now) {
			return Admission{}, nil
		}
	}
	for _, name := range names {
		if _, open := m.circuit[name]; !open {
			continue
		}
		if c, ok := m.probes[name]; ok && c.until.After(now) {
			return Admission{}, nil
		}
		m.seq++
		tok := "p" + strconv.FormatUint(m.seq, 10)
		m.probes[name] = probeClaim{token: tok, until: now.Add(m.probeTTL)}
		return Admission{Allowed: true, Probe: true, Token: tok, Name: name}, nil
	}
	return Admission{Allowed: true}, nil
}

// Settle ends the probe token of model: a success closes its circuit, a
// failure puts it back in cooldown for cooldown × 2^failures (at most
// MaxProbeCooldown), a release lets the next caller probe. A token that is
// no longer the model's probe (expired, taken over) settles nothing but a
// failure's cooldown.
func (m *Memory) Settle(_ context.Context, model, token, outcome string, cooldown time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := m.probes[model].token == token
	if held {
		delete(m.probes, model)
	}
	switch outcome {
	case ProbeSuccess:
		if held {
			delete(m.circuit, model)
		}
	case ProbeFailure:
		m.circuit[model]++
		d := probeCooldown(cooldown, m.circuit[model])
		if until := m.now().Add(d); until.After(m.until[model]) {
			m.until[model] = until
		}
	}
	return nil
}

// probeCooldown is cooldown × 2^failures, capped.
func probeCooldown(cooldown time.Duration, failures int) time.Duration {
	d := cooldown
	for range failures {
		if d >= MaxProbeCooldown {
			break
		}
		d *= 2
	}
	return min(d, MaxProbeCooldown)
}

// SetProbeTTL sets how long a probe claim lasts (DefaultProbeTTL).
func (m *Memory) SetProbeTTL(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.probeTTL = d
}
