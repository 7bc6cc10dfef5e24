package credstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/provider"
)

// MemoryOptions configure a Memory store.
type MemoryOptions struct {
	// Now is the clock of block times (nil: time.Now). Tests inject one to
	// expire blocks without waiting.
	Now func() time.Time
	// RedeemMinBlocked: a banked reset is spent only on a block with at
	// least this much time left (0: any block). The reference's default is
	// 60 minutes (codexResets.minBlockedMinutes).
	RedeemMinBlocked time.Duration
}

// Memory is the in-memory credential store of a single replica.
type Memory struct {
	now       func() time.Time
	redeemMin time.Duration
	// noRedeem: this Memory is a Redis store's local view, which must not
	// spend banked resets (only the shared store can do it exactly once).
	noRedeem bool

	mu    sync.Mutex
	provs map[string]*memProvider
	ids   map[string]*memCred
	gen   uint64 // counts local writes (see memCred.touched)
	// gone holds the local view's deletions: ID → provider and write count,
	// so that an older snapshot does not bring a credential back.
	gone map[string]tombstone
}

type tombstone struct {
	provider string
	gen      uint64
}

var _ Store = (*Memory)(nil)

// memProvider is one provider's credentials, in the order they were added,
// and its round-robin cursor (the position after the last pick).
type memProvider struct {
	creds []*memCred
	rr    int
}

type memCred struct {
	Credential
	seed   int // the configured BankedResets last applied (SourceConfig)
	until  time.Time
	reason string
	est    bool
	// touched is the Memory's write count when c was last written (the
	// Redis store's local view keeps what was written after a snapshot was
	// read over that snapshot).
	touched uint64
}

func (c *memCred) blocked(now time.Time) bool { return c.until.After(now) }

func (c *memCred) cred() provider.Credential {
	return provider.Credential{ID: c.ID, Secret: c.Secret}
}

func (c *memCred) info(now time.Time) Info {
	i := Info{ID: c.ID, Provider: c.Provider, Source: c.Source, Status: StatusAvailable,
		BankedResets: c.BankedResets, AutoRedeem: c.AutoRedeem}
	if c.blocked(now) {
		i.Status, i.BlockedUntil, i.BlockReason, i.BlockEstimated = StatusBlocked, c.until, c.reason, c.est
	}
	return i
}

// block sets c's block to until unless c already has a later one; a block
// the provider stated (!est) replaces an estimated one.
func (c *memCred) block(until time.Time, reason string, est bool, now time.Time) {
	if !c.blocked(now) || until.After(c.until) || (c.est && !est) {
		c.until, c.reason, c.est = until, reason, est
	}
}

// touchLocked marks c as written now.
func (m *Memory) touchLocked(c *memCred) {
	m.gen++
	c.touched = m.gen
}

func (c *memCred) unblock() { c.until, c.reason, c.est = time.Time{}, "", false }

// NewMemory returns an empty store.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Memory{now: opts.Now, redeemMin: opts.RedeemMinBlocked,
		provs: map[string]*memProvider{}, ids: map[string]*memCred{}}
}

// Add stores a credential (see Store.Add).
func (m *Memory) Add(_ context.Context, c Credential) (Info, error) {
	c, err := normalize(c)
	if err != nil {
		return Info{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if old, ok := m.ids[c.ID]; ok {
		if old.Source != SourceConfig || c.Source != SourceConfig || old.Provider != c.Provider {
			return Info{}, fmt.Errorf("%w: %s", ErrExists, c.ID)
		}
		old.Secret, old.AutoRedeem = c.Secret, c.AutoRedeem
		old.BankedResets = max(0, old.BankedResets+c.BankedResets-old.seed)
		old.seed = c.BankedResets
		m.touchLocked(old)
		return old.info(now), nil
	}
	mc := &memCred{Credential: c, seed: c.BankedResets}
	m.putLocked(mc)
	return mc.info(now), nil
}

// putLocked stores mc, replacing a credential with its ID in place.
func (m *Memory) putLocked(mc *memCred) {
	m.touchLocked(mc)
	if old, ok := m.ids[mc.ID]; ok {
		if old.Provider == mc.Provider {
			mp := m.provs[mc.Provider]
			mp.creds[slices.Index(mp.creds, old)] = mc
			m.ids[mc.ID] = mc
			return
		}
		m.removeLocked(old)
	}
	mp := m.provs[mc.Provider]
	if mp == nil {
		mp = &memProvider{}
		m.provs[mc.Provider] = mp
	}
	mp.creds = append(mp.creds, mc)
	m.ids[mc.ID] = mc
}

func (m *Memory) removeLocked(c *memCred) {
	delete(m.ids, c.ID)
	if mp := m.provs[c.Provider]; mp != nil {
		mp.creds = slices.DeleteFunc(mp.creds, func(x *memCred) bool { return x == c })
		if len(mp.creds) == 0 {
			delete(m.provs, c.Provider)
		}
	}
}

// Delete removes a credential added through the API.
func (m *Memory) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.ids[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if c.Source == SourceConfig {
		return fmt.Errorf("%w: %s (remove it there)", ErrReadOnly, id)
	}
	m.removeLocked(c)
	return nil
}

// List returns the credentials of providerName (all when empty).
func (m *Memory) List(_ context.Context, providerName string) ([]Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	names := []string{providerName}
	if providerName == "" {
		names = make([]string, 0, len(m.provs))
		for p := range m.provs {
			names = append(names, p)
		}
		slices.Sort(names)
	}
	var out []Info
	for _, p := range names {
		if mp := m.provs[p]; mp != nil {
			for _, c := range mp.creds {
				out = append(out, c.info(now))
			}
		}
	}
	return out, nil
}

// Pick returns the next available credential of providerName.
func (m *Memory) Pick(_ context.Context, providerName string) (provider.Credential, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.provs[providerName]
	if mp == nil || len(mp.creds) == 0 {
		return provider.Credential{}, false, nil
	}
	now := m.now()
	if c := mp.next(now, ""); c != nil {
		return c.cred(), true, nil
	}
	var until time.Time
	for _, c := range mp.creds {
		if until.IsZero() || c.until.Before(until) {
			until = c.until
		}
	}
	return provider.Credential{}, true, &AllBlockedError{Provider: providerName, Until: until, In: until.Sub(now)}
}

// next is the round-robin step: the first available credential other than
// skip from the cursor on, which moves past it; nil when there is none.
func (mp *memProvider) next(now time.Time, skip string) *memCred {
	n := len(mp.creds)
	if n == 0 {
		return nil
	}
	start := mp.rr % n
	for i := range n {
		idx := (start + i) % n
		if c := mp.creds[idx]; c.ID != skip && !c.blocked(now) {
			mp.rr = idx + 1
			return c
		}
	}
	return nil
}

// UsageLimited is step 7 of the retry flow (see Store.UsageLimited).
func (m *Memory) UsageLimited(_ context.Context, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.ids[credID]
	if !ok || c.Provider != providerName {
		return Switch{}, fmt.Errorf("%w: %s", ErrNotFound, credID)
	}
	now := m.now()
	c.block(now.Add(normWindow(window)), sanitizeReason(reason, c.Secret), !fromProvider, now)
	m.touchLocked(c)
	mp := m.provs[providerName]
	if s := mp.next(now, credID); s != nil {
		return Switch{Switched: true, To: s.cred()}, nil
	}
	if !m.noRedeem {
		if r := m.redeemableLocked(mp, credID, now); r != nil {
			r.BankedResets--
			r.unblock()
			m.touchLocked(r)
			return Switch{Switched: true, To: r.cred(), Redeemed: true, BankedLeft: r.BankedResets}, nil
		}
	}
	var sw Switch
	var earliest time.Time
	for _, s := range mp.creds {
		if s.ID == credID {
			continue
		}
		sw.HasSibling = true
		if s.blocked(now) && (earliest.IsZero() || s.until.Before(earliest)) {
			earliest = s.until
		}
	}
	if sw.HasSibling {
		sw.SiblingFreeIn = earliest.Sub(now)
	}
	return sw, nil
}

// redeemableLocked is the credential whose banked reset UsageLimited
// spends: blocked (with at least redeemMin left), AutoRedeem, banked
// resets left; credID first, then the others in order.
func (m *Memory) redeemableLocked(mp *memProvider, credID string, now time.Time) *memCred {
	ok := func(c *memCred) bool {
		return c.blocked(now) && c.until.Sub(now) >= m.redeemMin && c.AutoRedeem && c.BankedResets > 0
	}
	if c := m.ids[credID]; ok(c) {
		return c
	}
	for _, c := range mp.creds {
		if c.ID != credID && ok(c) {
			return c
		}
	}
	return nil
}

// Ready is always nil: memory does not fail.
func (m *Memory) Ready(context.Context) error { return nil }

// Degraded is always false.
func (m *Memory) Degraded() bool { return false }

// Close does nothing.
func (m *Memory) Close() error { return nil }

// The methods below serve the Redis store's local view.

// secretOf is the secret of a known credential ("" when unknown).
func (m *Memory) secretOf(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.ids[id]; ok {
		return c.Secret
	}
	return ""
}

// providerOf is the provider of a known credential.
func (m *Memory) providerOf(id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.ids[id]; ok {
		return c.Provider, true
	}
	return "", false
}

// providers lists the providers with credentials.
func (m *Memory) providers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.provs))
	for p := range m.provs {
		out = append(out, p)
	}
	return out
}

// snapshot copies providerName's credentials, in order.
func (m *Memory) snapshot(providerName string) []memCred {
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.provs[providerName]
	if mp == nil {
		return nil
	}
	out := make([]memCred, len(mp.creds))
	for i, c := range mp.creds {
		out[i] = *c
	}
	return out
}

// put stores a copy of mc as the shared store reported it.
func (m *Memory) put(mc memCred) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.putLocked(&mc)
}

// forget drops a credential that the shared store deleted.
func (m *Memory) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.ids[id]; ok {
		m.removeLocked(c)
		m.gen++
		if m.gone == nil {
			m.gone = map[string]tombstone{}
		}
		m.gone[id] = tombstone{provider: c.Provider, gen: m.gen}
	}
}

// mirrorBlock records a block the shared store made (or will be told of).
func (m *Memory) mirrorBlock(id string, until time.Time, reason string, est bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.ids[id]; ok {
		c.block(until, reason, est, m.now())
		m.touchLocked(c)
	}
}

// mirrorRedeem records a redeem the shared store made.
func (m *Memory) mirrorRedeem(id string, bankedLeft int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.ids[id]; ok {
		c.BankedResets = bankedLeft
		c.unblock()
		m.touchLocked(c)
	}
}

// generation is the local write count, read before a snapshot of the
// shared store is.
func (m *Memory) generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// replace makes snap, read from the shared store when the local write
// count was since, providerName's credentials. A credential written locally
// after that (added, blocked, redeemed) keeps its local state, and one
// added locally after it stays; the rotation cursor stays.
func (m *Memory) replace(providerName string, snap []memCred, since uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.provs[providerName]
	if mp == nil {
		mp = &memProvider{}
	}
	fresh := &memProvider{rr: mp.rr, creds: make([]*memCred, 0, len(snap))}
	seen := make(map[string]bool, len(snap))
	for i := range snap {
		c := &snap[i]
		if g, ok := m.gone[c.ID]; ok && g.gen > since {
			continue
		}
		old, ok := m.ids[c.ID]
		switch {
		case ok && old.Provider == providerName && old.touched > since:
			c = old
		case ok && old.Provider != providerName:
			m.removeLocked(old)
		}
		seen[c.ID] = true
		fresh.creds = append(fresh.creds, c)
		m.ids[c.ID] = c
	}
	for id, g := range m.gone {
		if g.provider == providerName && g.gen <= since {
			delete(m.gone, id)
		}
	}
	for _, old := range mp.creds {
		if seen[old.ID] {
			continue
		}
		if old.touched > since {
			fresh.creds = append(fresh.creds, old)
		} else {
			delete(m.ids, old.ID)
		}
	}
	if len(fresh.creds) == 0 {
		delete(m.provs, providerName)
		return
	}
	m.provs[providerName] = fresh
}
