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
	// MaxPerOwner bounds the credentials one tenant owns of one provider
	// (0: no bound); server credentials are not bounded. An add over it is
	// a *LimitError.
	MaxPerOwner int
}

// Memory is the in-memory credential store of a single replica.
type Memory struct {
	now       func() time.Time
	redeemMin time.Duration
	maxOwn    int
	// noRedeem: this Memory is a Redis store's local view, which must not
	// spend banked resets (only the shared store can do it exactly once).
	noRedeem bool

	mu    sync.Mutex
	provs map[string]*memProvider
	ids   map[credKey]*memCred
	gen   uint64 // counts local writes (see memCred.touched)
	// gone holds the local view's deletions: owner and ID → provider and
	// write count, so that an older snapshot does not bring a credential
	// back.
	gone map[credKey]tombstone
}

// credKey names a credential: IDs are namespaced by owner ("" for the
// server's credentials).
type credKey struct{ owner, id string }

type tombstone struct {
	provider string
	gen      uint64
}

var _ Store = (*Memory)(nil)

// memProvider is one provider's credentials, by owner ("" for the server's).
type memProvider struct {
	pools map[string]*memPool
}

// memPool is one owner's credentials of a provider, in the order they were
// added, and its round-robin cursor (the position after the last pick).
type memPool struct {
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

func (c *memCred) key() credKey { return credKey{c.Owner, c.ID} }

func (c *memCred) blocked(now time.Time) bool { return c.until.After(now) }

func (c *memCred) cred() provider.Credential {
	return provider.Credential{ID: c.ID, Secret: c.Secret, Account: accountOf(c.Account, c.ID), Owner: c.Owner}
}

func (c *memCred) info(now time.Time) Info {
	i := Info{ID: c.ID, Provider: c.Provider, Source: c.Source, Owner: c.Owner, Status: StatusAvailable,
		BankedResets: c.BankedResets, AutoRedeem: c.AutoRedeem, Account: c.Account}
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
	return &Memory{now: opts.Now, redeemMin: opts.RedeemMinBlocked, maxOwn: opts.MaxPerOwner,
		provs: map[string]*memProvider{}, ids: map[credKey]*memCred{}}
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
	if old, ok := m.ids[credKey{c.Owner, c.ID}]; ok {
		if old.Source != SourceConfig || c.Source != SourceConfig || old.Provider != c.Provider {
			return Info{}, fmt.Errorf("%w: %s", ErrExists, c.ID)
		}
		old.Secret, old.AutoRedeem, old.Account = c.Secret, c.AutoRedeem, c.Account
		old.BankedResets = max(0, old.BankedResets+c.BankedResets-old.seed)
		old.seed = c.BankedResets
		m.touchLocked(old)
		return old.info(now), nil
	}
	if _, ok := m.ids[credKey{"", c.ID}]; ok && c.Owner != "" {
		return Info{}, fmt.Errorf("%w: %s is a server credential's id", ErrExists, c.ID)
	}
	if c.Owner != "" && m.maxOwn > 0 {
		if pl := m.provs[c.Provider].pool(c.Owner); pl != nil && len(pl.creds) >= m.maxOwn {
			return Info{}, &LimitError{Provider: c.Provider, Limit: m.maxOwn}
		}
	}
	mc := &memCred{Credential: c, seed: c.BankedResets}
	m.putLocked(mc)
	return mc.info(now), nil
}

// pool is owner's pool of mp (nil when it has none).
func (mp *memProvider) pool(owner string) *memPool {
	if mp == nil {
		return nil
	}
	return mp.pools[owner]
}

// putLocked stores mc, replacing a credential with its owner and ID in
// place.
func (m *Memory) putLocked(mc *memCred) {
	m.touchLocked(mc)
	k := mc.key()
	if old, ok := m.ids[k]; ok {
		if old.Provider == mc.Provider {
			mp := m.provs[mc.Provider].pool(mc.Owner)
			mp.creds[slices.Index(mp.creds, old)] = mc
			m.ids[k] = mc
			return
		}
		m.removeLocked(old)
	}
	mp := m.provs[mc.Provider]
	if mp == nil {
		mp = &memProvider{pools: map[string]*memPool{}}
		m.provs[mc.Provider] = mp
	}
	pl := mp.pools[mc.Owner]
	if pl == nil {
		pl = &memPool{}
		mp.pools[mc.Owner] = pl
	}
	pl.creds = append(pl.creds, mc)
	m.ids[k] = mc
}

func (m *Memory) removeLocked(c *memCred) {
	delete(m.ids, c.key())
	mp := m.provs[c.Provider]
	if pl := mp.pool(c.Owner); pl != nil {
		pl.creds = slices.DeleteFunc(pl.creds, func(x *memCred) bool { return x == c })
		if len(pl.creds) == 0 {
			delete(mp.pools, c.Owner)
			if len(mp.pools) == 0 {
				delete(m.provs, c.Provider)
			}
		}
	}
}

// Delete removes owner's credential added through the API (see
// Store.Delete).
func (m *Memory) Delete(_ context.Context, owner, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.ids[credKey{owner, id}]
	if !ok {
		if _, srv := m.ids[credKey{"", id}]; srv && owner != "" {
			return fmt.Errorf("%w: %s", ErrForbidden, id)
		}
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if c.Source == SourceConfig {
		return fmt.Errorf("%w: %s (remove it there)", ErrReadOnly, id)
	}
	m.removeLocked(c)
	return nil
}

// owners lists the owners of mp's pools: the server ("") first, then the
// tenants by name, those f selects.
func (mp *memProvider) owners(f Filter) []string {
	out := make([]string, 0, len(mp.pools))
	for o := range mp.pools {
		if o == "" || f.All || o == f.Tenant {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// List returns the credentials f selects (see Store.List).
func (m *Memory) List(_ context.Context, f Filter) ([]Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	names := []string{f.Provider}
	if f.Provider == "" {
		names = make([]string, 0, len(m.provs))
		for p := range m.provs {
			names = append(names, p)
		}
		slices.Sort(names)
	}
	var out []Info
	for _, p := range names {
		mp := m.provs[p]
		if mp == nil {
			continue
		}
		for _, o := range mp.owners(f) {
			for _, c := range mp.pools[o].creds {
				out = append(out, c.info(now))
			}
		}
	}
	return out, nil
}

// tenantPool is a tenant's pool of one provider: its own credentials, then
// the server's that its own do not shadow (a server credential with the ID
// of one of the tenant's own of this provider).
type tenantPool struct {
	own, srv *memPool
}

func (m *Memory) tenantPoolLocked(tenant, providerName string) tenantPool {
	mp := m.provs[providerName]
	tp := tenantPool{srv: mp.pool("")}
	if tenant != "" {
		tp.own = mp.pool(tenant)
	}
	return tp
}

// shadowed reports whether the server's c is hidden by one of the tenant's
// own.
func (tp tenantPool) shadowed(c *memCred) bool {
	return tp.own != nil && slices.ContainsFunc(tp.own.creds, func(o *memCred) bool { return o.ID == c.ID })
}

// each calls fn with every credential of the pool, in pool order, until fn
// returns false.
func (tp tenantPool) each(fn func(*memCred) bool) {
	if tp.own != nil {
		for _, c := range tp.own.creds {
			if !fn(c) {
				return
			}
		}
	}
	if tp.srv != nil {
		for _, c := range tp.srv.creds {
			if !tp.shadowed(c) && !fn(c) {
				return
			}
		}
	}
}

// next is the round-robin step: the tenant's own first, then the server's
// (each on its own cursor), skipping skip.
func (tp tenantPool) next(now time.Time, skip *memCred) *memCred {
	if c := tp.own.next(now, skip, nil); c != nil {
		return c
	}
	return tp.srv.next(now, skip, tp.shadowed)
}

// resolve is the credential id of tenant's pool: its own, else the
// server's.
func (m *Memory) resolveLocked(tenant, providerName, id string) *memCred {
	if tenant != "" {
		if c, ok := m.ids[credKey{tenant, id}]; ok && c.Provider == providerName {
			return c
		}
	}
	if c, ok := m.ids[credKey{"", id}]; ok && c.Provider == providerName {
		return c
	}
	return nil
}

// Pick returns the next available credential of tenant's pool of
// providerName.
func (m *Memory) Pick(_ context.Context, tenant, providerName string) (provider.Credential, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tp := m.tenantPoolLocked(tenant, providerName)
	if tp.own == nil && tp.srv == nil {
		return provider.Credential{}, false, nil
	}
	now := m.now()
	if c := tp.next(now, nil); c != nil {
		return c.cred(), true, nil
	}
	var until time.Time
	tp.each(func(c *memCred) bool {
		if until.IsZero() || c.until.Before(until) {
			until = c.until
		}
		return true
	})
	return provider.Credential{}, true, &AllBlockedError{Provider: providerName, Until: until, In: until.Sub(now)}
}

// PickPreferred returns prefer when it is in tenant's pool and available,
// else what Pick picks (see Store.PickPreferred).
func (m *Memory) PickPreferred(ctx context.Context, tenant, providerName, prefer string) (provider.Credential, bool, error) {
	if prefer != "" {
		m.mu.Lock()
		now := m.now()
		c := m.resolveLocked(tenant, providerName, prefer)
		ok := c != nil && !c.blocked(now)
		if ok && c.Owner == "" {
			// A server credential is kept only while none of the tenant's
			// own is available: the pool's order comes first.
			if own := m.tenantPoolLocked(tenant, providerName).own; own != nil {
				ok = !slices.ContainsFunc(own.creds, func(o *memCred) bool { return !o.blocked(now) })
			}
		}
		var cred provider.Credential
		if ok {
			cred = c.cred()
		}
		m.mu.Unlock()
		if ok {
			return cred, true, nil
		}
	}
	return m.Pick(ctx, tenant, providerName)
}

// next is the round-robin step of one pool: the first available credential
// other than skip and not hidden from the cursor on, which moves past it;
// nil when there is none.
func (pl *memPool) next(now time.Time, skip *memCred, hidden func(*memCred) bool) *memCred {
	if pl == nil || len(pl.creds) == 0 {
		return nil
	}
	n := len(pl.creds)
	start := pl.rr % n
	for i := range n {
		idx := (start + i) % n
		if c := pl.creds[idx]; c != skip && !c.blocked(now) && (hidden == nil || !hidden(c)) {
			pl.rr = idx + 1
			return c
		}
	}
	return nil
}

// UsageLimited is step 7 of the retry flow (see Store.UsageLimited).
func (m *Memory) UsageLimited(_ context.Context, tenant, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.resolveLocked(tenant, providerName, credID)
	if c == nil {
		return Switch{}, fmt.Errorf("%w: %s", ErrNotFound, credID)
	}
	now := m.now()
	c.block(now.Add(normWindow(window)), sanitizeReason(reason, c.Secret), !fromProvider, now)
	m.touchLocked(c)
	tp := m.tenantPoolLocked(tenant, providerName)
	if s := tp.next(now, c); s != nil {
		return Switch{Switched: true, To: s.cred()}, nil
	}
	if !m.noRedeem {
		if r := m.redeemableLocked(tp, c, now); r != nil {
			r.BankedResets--
			r.unblock()
			m.touchLocked(r)
			return Switch{Switched: true, To: r.cred(), Redeemed: true, BankedLeft: r.BankedResets}, nil
		}
	}
	var sw Switch
	var earliest time.Time
	tp.each(func(s *memCred) bool {
		if s == c {
			return true
		}
		sw.HasSibling = true
		if s.blocked(now) && (earliest.IsZero() || s.until.Before(earliest)) {
			earliest = s.until
		}
		return true
	})
	if sw.HasSibling {
		sw.SiblingFreeIn = earliest.Sub(now)
	}
	return sw, nil
}

// redeemableLocked is the credential whose banked reset UsageLimited
// spends: blocked (with at least redeemMin left), AutoRedeem, banked
// resets left; c first, then the others in pool order.
func (m *Memory) redeemableLocked(tp tenantPool, c *memCred, now time.Time) *memCred {
	ok := func(c *memCred) bool {
		return c.blocked(now) && c.until.Sub(now) >= m.redeemMin && c.AutoRedeem && c.BankedResets > 0
	}
	if ok(c) {
		return c
	}
	var found *memCred
	tp.each(func(s *memCred) bool {
		if s != c && ok(s) {
			found = s
			return false
		}
		return true
	})
	return found
}

// Ready is always nil: memory does not fail.
func (m *Memory) Ready(context.Context) error { return nil }

// Degraded is always false.
func (m *Memory) Degraded() bool { return false }

// Close does nothing.
func (m *Memory) Close() error { return nil }

// The methods below serve the Redis store's local view.

// resolve is the owner and secret of credential id of tenant's pool of
// providerName; ok is false when the view does not know it.
func (m *Memory) resolve(tenant, providerName, id string) (owner, secret string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.resolveLocked(tenant, providerName, id); c != nil {
		return c.Owner, c.Secret, true
	}
	return "", "", false
}

// knownElsewhere reports whether id is known in tenant's namespace or the
// server's, but of another provider than providerName.
func (m *Memory) knownElsewhere(tenant, providerName, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range []string{tenant, ""} {
		if c, ok := m.ids[credKey{o, id}]; ok && c.Provider != providerName {
			return true
		}
	}
	return false
}

// providerOf is the provider of owner's known credential id.
func (m *Memory) providerOf(owner, id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.ids[credKey{owner, id}]; ok {
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

// snapshot copies providerName's credentials, every owner's: the server's
// first, then each tenant's by name, each in order.
func (m *Memory) snapshot(providerName string) []memCred {
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.provs[providerName]
	if mp == nil {
		return nil
	}
	var out []memCred
	for _, o := range mp.owners(Filter{All: true}) {
		for _, c := range mp.pools[o].creds {
			out = append(out, *c)
		}
	}
	return out
}

// put stores a copy of mc as the shared store reported it.
func (m *Memory) put(mc memCred) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.putLocked(&mc)
}

// forget drops owner's credential id, which the shared store deleted.
func (m *Memory) forget(owner, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := credKey{owner, id}
	if c, ok := m.ids[k]; ok {
		m.removeLocked(c)
		m.gen++
		if m.gone == nil {
			m.gone = map[credKey]tombstone{}
		}
		m.gone[k] = tombstone{provider: c.Provider, gen: m.gen}
	}
}

// mirrorBlock records a block the shared store made (or will be told of)
// of owner's credential id.
func (m *Memory) mirrorBlock(owner, id string, until time.Time, reason string, est bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.ids[credKey{owner, id}]; ok {
		c.block(until, reason, est, m.now())
		m.touchLocked(c)
	}
}

// mirrorRedeem records a redeem the shared store made.
func (m *Memory) mirrorRedeem(owner, id string, bankedLeft int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.ids[credKey{owner, id}]; ok {
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
// count was since, providerName's credentials (every owner's). A
// credential written locally after that (added, blocked, redeemed) keeps
// its local state, and one added locally after it stays; the rotation
// cursors stay.
func (m *Memory) replace(providerName string, snap []memCred, since uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mp := m.provs[providerName]
	if mp == nil {
		mp = &memProvider{pools: map[string]*memPool{}}
	}
	fresh := &memProvider{pools: map[string]*memPool{}}
	add := func(c *memCred) {
		pl := fresh.pools[c.Owner]
		if pl == nil {
			pl = &memPool{}
			if old := mp.pools[c.Owner]; old != nil {
				pl.rr = old.rr
			}
			fresh.pools[c.Owner] = pl
		}
		pl.creds = append(pl.creds, c)
	}
	seen := make(map[credKey]bool, len(snap))
	for i := range snap {
		c := &snap[i]
		k := c.key()
		if g, ok := m.gone[k]; ok && g.gen > since {
			continue
		}
		old, ok := m.ids[k]
		switch {
		case ok && old.Provider == providerName && old.touched > since:
			c = old
		case ok && old.Provider != providerName:
			m.removeLocked(old)
		}
		seen[k] = true
		add(c)
		m.ids[k] = c
	}
	for k, g := range m.gone {
		if g.provider == providerName && g.gen <= since {
			delete(m.gone, k)
		}
	}
	for _, o := range mp.owners(Filter{All: true}) {
		for _, old := range mp.pools[o].creds {
			if seen[old.key()] {
				continue
			}
			if old.touched > since {
				add(old)
			} else {
				delete(m.ids, old.key())
			}
		}
	}
	if len(fresh.pools) == 0 {
		delete(m.provs, providerName)
		return
	}
	m.provs[providerName] = fresh
}
