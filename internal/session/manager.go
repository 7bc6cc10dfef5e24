// Package session runs agent sessions: a registry safe for thousands of
// concurrent sessions, one prompt at a time per session, persisted history
// and a runtime context, per-session event logs that fan out to any number
// of readers, and the retry engine's lifecycle (docs/retry-policy.md §5).
// It knows no transport: the server maps its events to the API.
package session

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
)

// Errors of the session API. The server maps them onto gRPC codes.
var (
	ErrNotFound = errors.New("session not found")
	ErrBusy     = errors.New("session is busy")
	ErrClosed   = errors.New("server is shutting down")
	ErrLimit    = errors.New("session limit reached")
)

// InvalidError is bad input; Field names the request field.
type InvalidError struct {
	Field string
	Msg   string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Msg: fmt.Sprintf(format, clipArgs(args)...)}
}

// maxEcho bounds what of a caller's input an error repeats.
const maxEcho = 128

// clipArgs cuts the strings among args to maxEcho bytes (on a rune
// boundary), noting their length: an error never echoes a huge input whole.
func clipArgs(args []any) []any {
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > maxEcho {
			cut := maxEcho
			for cut > 0 && s[cut]&0xC0 == 0x80 {
				cut--
			}
			args[i] = fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
		}
	}
	return args
}

// Provider is a configured provider as the session engine sees it.
type Provider struct {
	Name   string
	Kind   string
	Models []string // when non-empty, the only models it serves
	// Catalog is what the configuration's model catalog says of its models,
	// by name (a model without an entry is unknown: nothing is checked).
	Catalog map[string]provider.ModelInfo
	// RotateCredentials: every call takes the next credential in rotation
	// (Credentials.PickPreferred without a preference) instead of keeping the
	// session's.
	RotateCredentials bool
	Client            provider.Provider
	// Pace: a successful response's rate-limit headers showing a bucket at
	// 0 remaining block its credential until the reset (Pacer).
	Pace bool
}

// ModelInfo is the catalog's entry for model (Name set even when the
// catalog has none).
func (p Provider) ModelInfo(model string) provider.ModelInfo {
	if info, ok := p.Catalog[model]; ok {
		return info
	}
	return provider.ModelInfo{Name: model}
}

// PromptValidator is implemented by providers that can reject a prompt
// before anything runs (the simulated provider checks its fault script).
type PromptValidator interface {
	ValidatePrompt(text string) error
}

// Credentials is what the session engine needs of the credential store: two
// methods of credstore.Store, in its own terms, so that a store (or a
// decorator of one, counting its calls) is given as it is.
type Credentials interface {
	// PickPreferred returns the credential for a session of tenant's next
	// call to the provider, from tenant's pool (its own credentials, then
	// the server's); ok is false when the provider has none (the simulated
	// one). prefer is the credential the session used last: it is kept
	// while it is in the pool and available (the provider's prompt cache
	// is per account), without moving the pool's rotation; "" (a session's
	// first call to the provider) picks in rotation, which spreads sessions
	// over the siblings.
	PickPreferred(ctx context.Context, tenant, providerName, prefer string) (c provider.Credential, ok bool, err error)
	// UsageLimited is step 7 of the retry flow: it records that cred (of
	// tenant's pool) hit a usage limit for window (the provider's hint when
	// fromProvider, else the retry engine's estimate) and tries to switch to
	// a sibling of that pool.
	UsageLimited(ctx context.Context, tenant, providerName, credID string, window time.Duration, fromProvider bool, reason string) (credstore.Switch, error)
}

var _ Credentials = credstore.Store(nil)

// Pacer is implemented by Credentials that take pacing blocks: cred (of
// tenant's pool) has a rate-limit bucket at 0 remaining for wait, so it is
// blocked until then with reason (it starts with "paced") and the next
// call goes to a sibling, or waits, without spending a 429.
type Pacer interface {
	Paced(ctx context.Context, tenant, providerName, credID string, wait time.Duration, reason string) error
}

// Options configure a Manager.
type Options struct {
	Providers []Provider
	Retry     retry.Settings // server defaults
	// Shared is the store of sessions, their histories and event logs:
	// Redis lets several replicas serve the same sessions; nil is a
	// MemoryStore of this process alone. Either way a session runs the
	// same engine (leases, fenced writes, a gated event log), so local
	// mode is no second code path.
	Shared Shared
	// LeaseTTL is the lease a replica holds on a session while it runs a
	// prompt (0: DefaultLeaseTTL); a lost replica's prompts are taken over
	// within about 1.5 of it.
	LeaseTTL    time.Duration
	Credentials Credentials // nil: providers need none
	Cooldowns   Cooldowns   // nil: models never cool down
	Budget      RetryBudget // nil: retries are bounded by retry.max_retries alone
	Observer    Observer    // nil: NopObserver (metrics)
	// FallbackCooldown is the cooldown of a failing model when the provider
	// gave no hint (0: the retry engine's estimate from the error's wording,
	// DefaultFallbackCooldown when it has none).
	FallbackCooldown time.Duration
	EventBuffer      int // events kept per session for resume
	MaxPromptBytes   int
	// MaxSessions bounds the sessions of a Manager on its own MemoryStore
	// (0: unbounded; ignored with a store shared by replicas, where
	// limits.max_sessions_per_tenant bounds each tenant across them).
	MaxSessions int
	// Limits bound each tenant and each session (zero fields: their
	// DefaultLimits).
	Limits Limits
	// ToolResultTimeout bounds the wait for a client's tool results
	// (0: DefaultToolResultTimeout).
	ToolResultTimeout time.Duration
	Logger            *slog.Logger
	// Rand draws the backoff jitter in [0,1); nil uses math/rand/v2.
	Rand func() float64
	// Now is the clock of event and history timestamps; nil uses time.Now.
	// Timers use the time package, so tests control them with testing/synctest.
	Now func() time.Time
	// Tracer, when set, traces every prompt: a span per prompt and a child
	// span per model call attempt (see trace.go). Nil: no tracing, at no
	// cost. CaptureContent puts prompt and answer text on the spans.
	Tracer         trace.Tracer
	CaptureContent bool
}

// Manager is the registry of sessions.
type Manager struct {
	opts      Options
	providers map[string]Provider
	log       *slog.Logger
	// traced holds the running prompt's *spanRef by session id, for the log
	// lines' trace ids (trace.go); only with Options.Tracer.
	traced sync.Map

	baseCtx context.Context
	stop    context.CancelFunc
	runs    sync.WaitGroup
	workers *runWorkers    // the goroutines the runs run on (runworkers.go)
	bg      sync.WaitGroup // pulls, the janitor and the mirrors' poller (shared store)

	// rep is replication, the only way the session core reaches it.
	rep replication
	// The store's parts, each used by its side of the engine (shared.go).
	store  Store
	leases Leases
	events EventStream
	bus    ControlBus

	// ownCooldowns: the cooldowns of tenants' own keys' failures.
	ownCooldowns tenantCooldowns

	// ownStore: the store is this process's own (Options.Shared nil), so
	// nothing outlives the process: a shutdown hands no retry over, and
	// the registry keeps every session (it is the only copy's index).
	ownStore bool

	mu       sync.RWMutex
	sessions map[string]*Session
	// sessionsPeak is the most sessions has held since it was last
	// copied smaller (shrunk).
	sessionsPeak int
	followed     map[*Session]struct{} // copies following the stored log (startMirror)
	followedPeak int                   // the most followed has held since it was last shrunk
	creating     int                   // ownStore: Creates past the MaxSessions check, not registered yet
	closed       bool
}

// NewManager returns a Manager. Close it to stop every session.
func NewManager(opts Options) *Manager {
	if opts.EventBuffer <= 0 {
		opts.EventBuffer = DefaultEventBuffer
	}
	local := opts.Shared == nil
	if local {
		opts.Shared = NewMemoryStore(opts.EventBuffer).Replica("")
	}
	if opts.MaxPromptBytes <= 0 {
		opts.MaxPromptBytes = 1 << 20
	}
	if opts.ToolResultTimeout <= 0 {
		opts.ToolResultTimeout = DefaultToolResultTimeout
	}
	if opts.Observer == nil {
		opts.Observer = NopObserver{}
	}
	if opts.Rand == nil {
		opts.Rand = mrand.Float64
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Limits = opts.Limits.withDefaults()
	m := &Manager{opts: opts, store: opts.Shared, leases: opts.Shared, events: opts.Shared, bus: opts.Shared, ownStore: local, providers: map[string]Provider{}, log: opts.Logger, sessions: map[string]*Session{},
		followed: map[*Session]struct{}{}}
	if opts.Tracer != nil {
		// Log lines about a session carry its running prompt's trace id.
		m.log = slog.New(traceIDHandler{next: opts.Logger.Handler(), m: m})
	}
	for _, p := range opts.Providers {
		m.providers[p.Name] = p
	}
	m.rep = replicas{}
	m.workers = newRunWorkers()
	m.baseCtx, m.stop = context.WithCancel(context.Background())
	m.startShared()
	return m
}

// CreateParams are the inputs of Create.
type CreateParams struct {
	Model        string
	Role         string
	SystemPrompt string
	Retry        RetryOverrides
	Tools        []provider.Tool
	// Params are the model parameters of the session's calls (zero: the
	// provider's defaults), checked against Model's provider kind and
	// catalog.
	Params provider.Params
}

// RetryOverrides are per-session overrides of the server's retry settings.
type RetryOverrides = retry.Overrides

var (
	rolePattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	toolNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

// isSessionID reports whether id has the form newID("ses_") makes:
// ^ses_[a-z2-7]{26}$ (checked on every call, without a regexp).
func isSessionID(id string) bool {
	rest, ok := strings.CutPrefix(id, "ses_")
	if !ok || len(rest) != idEncoding.EncodedLen(16) {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Create validates p and creates a session owned by tenant.
func (m *Manager) Create(ctx context.Context, tenant string, p CreateParams) (*Session, error) {
	if err := m.checkModel("model", p.Model); err != nil {
		return nil, err
	}
	if p.Role == "" {
		p.Role = "default"
	}
	if !rolePattern.MatchString(p.Role) {
		return nil, invalid("role", "%q must match %s", p.Role, rolePattern)
	}
	lim := m.opts.Limits
	if len(p.SystemPrompt) > lim.MaxSystemPromptBytes {
		return nil, invalid("system_prompt", "is %d bytes, more than %s (%d)", len(p.SystemPrompt), LimitSystemPromptBytes, lim.MaxSystemPromptBytes)
	}
	if err := lim.checkRetryCaps(p.Retry); err != nil {
		return nil, err
	}
	settings, err := m.applyOverrides(p.Retry)
	if err != nil {
		return nil, err
	}
	if len(p.Tools) > lim.MaxTools {
		return nil, invalid("tools", "has %d tools, more than %s (%d)", len(p.Tools), LimitTools, lim.MaxTools)
	}
	if err := checkTools(p.Tools); err != nil {
		return nil, err
	}
	if err := m.checkParams(p.Model, p.Params); err != nil {
		return nil, err
	}
	id := newID("ses_")
	// With a shared store, lastUsed keeps the new copy from being dropped
	// as idle (evictIdle) before anyone used it.
	s := &Session{
		m: m, id: id, tenant: tenant, created: m.opts.Now(), lastUsed: time.Now(),
		role: p.Role, system: p.SystemPrompt, tools: p.Tools, params: p.Params,
		primary: p.Model, model: p.Model, settings: settings,
		log: m.newLog(id),
	}
	if err := m.reserve(); err != nil {
		return nil, err
	}
	// The tenant's sessions are counted, and this one added, in one step
	// of the store: the bound holds across replicas.
	res, err := m.store.Create(ctx, recordOf(s), lim.MaxSessionsPerTenant)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ownStore {
		m.creating--
	}
	if err != nil {
		return nil, unavailable("store the session", err)
	}
	if !res.Created {
		return nil, sessionsLimitError(res.Sessions)
	}
	s.order = res.Order
	if m.closed {
		// Stored, but the manager is gone: the store keeps it for the
		// replicas (a MemoryStore goes with the process).
		return nil, ErrClosed
	}
	m.sessions[id] = s
	return s, nil
}

// reserve admits one more Create: ErrClosed once the manager is closed,
// ErrLimit past MaxSessions on a store of this process's own (whose
// registry holds every session), counted until Create registers it.
func (m *Manager) reserve() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.ownStore {
		if max := m.opts.MaxSessions; max > 0 && len(m.sessions)+m.creating >= max {
			return fmt.Errorf("%w: at most %d sessions", ErrLimit, max)
		}
		m.creating++
	}
	return nil
}

// checkModel validates a provider/model reference.
func (m *Manager) checkModel(field, ref string) error {
	if ref == "" {
		return invalid(field, "is required (provider/model, e.g. sim/echo)")
	}
	name, model, ok := strings.Cut(ref, "/")
	if !ok || name == "" || model == "" {
		return invalid(field, "%q is not provider/model (e.g. sim/echo)", ref)
	}
	p, ok := m.providers[name]
	if !ok {
		return invalid(field, "unknown provider %q (configured: %s)", name, strings.Join(m.providerNames(), ", "))
	}
	if len(p.Models) > 0 && !slices.Contains(p.Models, model) {
		return invalid(field, "provider %q has no model %q (models: %s)", name, model, strings.Join(p.Models, ", "))
	}
	return nil
}

func (m *Manager) providerNames() []string {
	names := make([]string, 0, len(m.providers))
	for n := range m.providers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (m *Manager) applyOverrides(o RetryOverrides) (retry.Settings, error) {
	s := m.opts.Retry.With(o)
	if err := s.Validate(); err != nil {
		return s, &InvalidError{Field: "retry", Msg: err.Error()}
	}
	roles := make([]string, 0, len(s.FallbackChains))
	for role := range s.FallbackChains {
		roles = append(roles, role)
	}
	slices.Sort(roles)
	for _, role := range roles {
		for i, ref := range s.FallbackChains[role] {
			if err := m.checkModel(fmt.Sprintf("retry.fallback_chains.%s[%d]", role, i), ref); err != nil {
				return s, err
			}
		}
	}
	return s, nil
}

func checkTools(tools []provider.Tool) error {
	seen := map[string]bool{}
	for i, t := range tools {
		field := fmt.Sprintf("tools[%d]", i)
		if !toolNamePattern.MatchString(t.Name) {
			return invalid(field+".name", "%q must match %s", t.Name, toolNamePattern)
		}
		if seen[t.Name] {
			return invalid(field+".name", "tool %q is declared twice", t.Name)
		}
		seen[t.Name] = true
		if len(t.InputSchema) > 0 {
			var schema map[string]any
			if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
				return invalid(field+".input_schema", "is not a JSON object: %v", err)
			}
			if typ, ok := schema["type"]; ok && typ != "object" {
				return invalid(field+".input_schema", "type must be \"object\", got %v", typ)
			}
		}
	}
	return nil
}

// Get returns tenant's session id. Unless its prompt runs here, it reads
// the session's record from the store (ctx bounds that).
func (m *Manager) Get(ctx context.Context, tenant, id string) (*Session, error) {
	if !isSessionID(id) {
		return nil, invalid("session_id", "%q is not a session id", id)
	}
	return m.lookupShared(ctx, tenant, id)
}

// Shared reports whether sessions live in a store shared with other
// replicas (Options.Shared set), not in this process's own.
func (m *Manager) Shared() bool { return !m.ownStore }

// GetToPrompt is Get for a prompt: this replica's copy
// of the session serves as it is, without a read of the store, since the
// prompt's start (Session.Prompt) reads the record anyway and reports a
// session deleted meanwhile as not found.
func (m *Manager) GetToPrompt(ctx context.Context, tenant, id string) (*Session, error) {
	if isSessionID(id) {
		m.mu.RLock()
		s, ok := m.sessions[id]
		m.mu.RUnlock()
		if ok && s.tenant == tenant {
			return s, nil
		}
	}
	return m.Get(ctx, tenant, id)
}

// List returns up to limit of tenant's sessions created after the page
// token, oldest first, and the token of the next page ("" on the last).
func (m *Manager) List(ctx context.Context, tenant string, limit int, pageToken string) ([]*Session, string, error) {
	var after uint64
	if pageToken != "" {
		n, err := strconv.ParseUint(strings.TrimPrefix(pageToken, "o"), 10, 64)
		if err != nil || !strings.HasPrefix(pageToken, "o") {
			return nil, "", invalid("page_token", "%q is not a token this server issued", pageToken)
		}
		after = n
	}
	recs, err := m.store.ListRecords(ctx, tenant, after, limit+1)
	if err != nil {
		return nil, "", unavailable("list sessions", err)
	}
	next := ""
	if len(recs) > limit {
		recs = recs[:limit]
		next = "o" + strconv.FormatUint(recs[len(recs)-1].Order, 10)
	}
	out := make([]*Session, 0, len(recs))
	for _, r := range recs {
		out = append(out, m.adopt(r))
	}
	return out, next, nil
}

// Delete aborts what tenant's session id runs, then removes it.
func (m *Manager) Delete(ctx context.Context, tenant, id string) error {
	s, err := m.Get(ctx, tenant, id)
	if err != nil {
		return err
	}
	if owner, err := m.rep.owner(ctx, s); err != nil || owner != "" {
		if err != nil {
			return err
		}
		if err := m.rep.forward(ctx, s, owner, Control{Op: OpAbort, Cause: causeDeleted}); err != nil && !errors.Is(err, ErrUnavailable) {
			return err
		}
	}
	// Deleted first, under the same lock as the abort: no prompt can start
	// in between.
	s.mu.Lock()
	if s.deleted {
		s.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	s.deleted = true
	done := s.abortLocked(stopDeleted)
	s.mu.Unlock()
	var waitErr error
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			// The aborted run ends on its own; the session goes regardless.
			waitErr = fmt.Errorf("the running prompt had not ended when the session was removed: %w", ctx.Err())
		}
	}
	// Removed from the store first: a lookup meanwhile finds this copy
	// (deleted) and no other, and a reader that looks the session up once
	// its stream ends finds it gone.
	rmErr := m.store.Remove(context.WithoutCancel(ctx), id, tenant)
	m.mu.Lock()
	delete(m.sessions, id)
	m.sessions = shrunk(m.sessions, &m.sessionsPeak)
	m.mu.Unlock()
	s.log.close()
	for _, p := range m.providers {
		if f, ok := p.Client.(provider.Forgetter); ok {
			f.Forget(id)
		}
	}
	if rmErr != nil {
		return unavailable("remove the session", rmErr)
	}
	return waitErr
}

// Subscribers is the number of event readers over every session.
func (m *Manager) Subscribers() int {
	m.mu.RLock()
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.RUnlock()
	n := 0
	for _, s := range all {
		n += s.Subscribers()
	}
	return n
}

// Count is the number of sessions.
func (m *Manager) Count() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.sessions)
}

// Close aborts every running prompt (each ends with a prompt_end event),
// closes every event log and waits for the runs to end, or for ctx. With a
// shared store, a retry waiting in backoff is handed to the other replicas
// instead: they resume it at its due time.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		s.mu.Lock()
		if !s.handOffLocked() {
			s.abortLocked(stopShutdown)
		}
		s.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { m.runs.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("sessions did not stop in time: %w", ctx.Err())
	}
	m.stop()
	m.workers.close()
	m.bg.Wait()
	for _, s := range all {
		s.log.close()
	}
	return err
}

// Go runs f on one of the goroutines kept for the prompts' runs: a
// waiting one, whose stack a run has grown already, else a new one, kept
// after f for the next run. It is for a short call that goes deep, on the
// way of every prompt, so that a goroutine's stack is not grown and copied
// for each: the server writes an SSE stream's header and first frames
// with it. f holds its goroutine until it returns; no call ever waits for
// a goroutine.
func (m *Manager) Go(f func()) { m.workers.start(f) }

// ShedIdleWorkers ends the goroutines kept for the next prompts' runs that
// wait now, and with them their stacks (up to 2 MiB): for when the load
// has dropped.
func (m *Manager) ShedIdleWorkers() { m.workers.shed() }

// idRand hands out crypto/rand's bytes from a buffer refilled 32 IDs at a
// time: a prompt's ID is made on its way to the model call, where the
// random source called cold once per prompt, with the encoding's three
// copies, took 8 µs (4 now).
var idRand randBuffer

type randBuffer struct {
	mu  sync.Mutex
	buf [512]byte
	n   int // unread bytes at the end of buf
}

func (r *randBuffer) read(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n < len(p) {
		_, _ = rand.Read(r.buf[:])
		r.n = len(r.buf)
	}
	start := len(r.buf) - r.n
	copy(p, r.buf[start:start+len(p)])
	clear(r.buf[start : start+len(p)]) // handed out once
	r.n -= len(p)
}

// idEncoding is base32 in lower case (RFC 4648's alphabet), unpadded.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns prefix followed by 26 random base32 characters (128 random
// bits), in one allocation (one per prompt and per session).
func newID(prefix string) string {
	var b [16]byte
	idRand.read(b[:])
	var buf [48]byte
	return string(idEncoding.AppendEncode(append(buf[:0], prefix...), b[:]))
}
