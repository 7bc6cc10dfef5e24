package credstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/provider"
)

// RedisOptions configure a Redis store.
type RedisOptions struct {
	// KeyPrefix starts every key (default "agentd:"); give each deployment
	// sharing a Redis its own.
	KeyPrefix string
	// Timeout bounds each Redis call (default 500ms, at most 10s): a dead
	// Redis never holds a request longer.
	Timeout time.Duration
	// SyncInterval is how often the reconciler refreshes the local view,
	// probes Redis while degraded, and writes back what happened meanwhile
	// (default 1s, between 10ms and 1m).
	SyncInterval time.Duration
	// RedeemMinBlocked: see MemoryOptions.
	RedeemMinBlocked time.Duration
	// SecretKey, when set (16, 24 or 32 bytes), seals secrets with AES-GCM
	// before they are written to Redis; every replica needs the same key.
	// Without it Redis holds secrets in clear: protect it with ACLs (a user
	// limited to ~<prefix>*) and TLS.
	SecretKey []byte
	// Logger receives state changes (degraded, recovered, restored); never
	// secrets. Nil: discard.
	Logger *slog.Logger

	// offset shifts the clock of blocks (Redis TIME and the local view's),
	// for tests only.
	offset func() time.Duration
}

// Defaults and bounds of RedisOptions.
const (
	DefaultKeyPrefix    = "agentd:"
	DefaultTimeout      = 500 * time.Millisecond
	DefaultSyncInterval = time.Second
)

// Redis is the credential store shared by every replica through Redis
// (single node, Sentinel or Cluster through a redis.UniversalClient).
//
// What Redis holds, per provider P (all keys of P share the hash tag
// {prov:P}, hence one Cluster slot):
//
//	<prefix>{prov:P}:creds   HASH  id → secret (sealed with SecretKey, else clear), source, banked resets, auto-redeem
//	<prefix>{prov:P}:order   ZSET  rotation order
//	<prefix>{prov:P}:blocks  HASH  id → blocked-until (Redis clock, ms), reason; TTL = the latest block's end
//	<prefix>{prov:P}:meta    HASH  add sequence, rotation cursor, version, epoch
//	<prefix>providers        SET   provider names (for listing every provider)
//
// Only :blocks has a TTL; the rest lives as long as its credentials. Block
// expiry compares with Redis' own clock (TIME inside the scripts; in a
// Cluster, the clock of the node that owns the provider's slot): a replica
// with a skewed clock cannot unblock early or late. Replicas exchange
// durations ("blocked for 59m58s"), never instants; Info.BlockedUntil is
// that duration added to the local clock.
//
// Secrets: Redis holds them (every replica must be able to use a
// credential added through any replica's API), in clear unless
// RedisOptions.SecretKey seals them. Give agentd a Redis ACL user limited
// to its prefix (~agentd:*) and use TLS. They never appear in Info, errors
// or logs.
//
// Degraded mode: when Redis is unreachable (any call fails or times out),
// the store serves from its local view — a copy of Redis' state that the
// reconciler refreshes every SyncInterval — and records blocks locally; a
// background reconciler probes Redis and, once it answers, writes those
// blocks (and configuration credentials added meanwhile) back, then leaves
// degraded mode. While degraded, banked resets are not spent (only Redis
// can spend one exactly once across replicas) and API credentials cannot be
// added or deleted (ErrUnavailable). If Redis comes back empty (restarted
// without persistence, flushed), each replica restores its local view into
// it: missing credentials with their banked resets, and blocks (the later
// time wins). A credential deleted less than SyncInterval before the data
// loss can come back this way; to wipe the store on purpose, stop every
// replica first.
type Redis struct {
	c     redisClient
	opts  RedisOptions
	log   *slog.Logger
	local *Memory
	seal  *sealer

	degraded atomic.Bool
	failures atomic.Uint64 // bumped by every failure, so a sync does not clear a newer one

	mu      sync.Mutex
	lastErr error
	since   time.Time
	blocks  map[string]pendingBlock // "provider\x00id" → block made while degraded
	adds    map[string]Credential   // id → configuration credential added while degraded
	known   map[string]known        // provider → last epoch and version read

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	done   chan struct{}
	closed sync.Once
}

var _ Store = (*Redis)(nil)

// redisClient is what the store needs of go-redis.
type redisClient interface {
	redis.Scripter
	Ping(ctx context.Context) *redis.StatusCmd
	SAdd(ctx context.Context, key string, members ...any) *redis.IntCmd
	SMembers(ctx context.Context, key string) *redis.StringSliceCmd
	HExists(ctx context.Context, key, field string) *redis.BoolCmd
}

type pendingBlock struct {
	provider, id, reason string
	until                time.Time // local view's clock
	est                  bool
}

type known struct{ epoch, ver string }

// ClientOptions sets on o what the Redis store relies on: go-redis honours
// context deadlines (ContextTimeoutEnabled) and dial, read, write and pool
// waits are bounded by timeout (when not set). Use it when creating the
// client: redis.NewUniversalClient(credstore.ClientOptions(&redis.UniversalOptions{Addrs: …}, 0)).
// timeout ≤ 0 means DefaultTimeout.
func ClientOptions(o *redis.UniversalOptions, timeout time.Duration) *redis.UniversalOptions {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	o.ContextTimeoutEnabled = true
	for _, d := range []*time.Duration{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout} {
		if *d == 0 {
			*d = timeout
		}
	}
	return o
}

// NewRedis returns a store on client and starts its reconciler (Close
// stops it). The client must honour context deadlines (see ClientOptions);
// the store does not close it. NewRedis does not wait for Redis: if it is
// down, the store starts degraded.
func NewRedis(client redis.UniversalClient, opts RedisOptions) (*Redis, error) {
	if client == nil {
		return nil, errors.New("credstore: nil Redis client")
	}
	if !ContextTimeouts(client) {
		return nil, errors.New("credstore: the Redis client must be created with ContextTimeoutEnabled (see credstore.ClientOptions), or a dead Redis could hold requests")
	}
	seal, err := newSealer(opts.SecretKey)
	if err != nil {
		return nil, err
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = DefaultKeyPrefix
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	opts.Timeout = min(opts.Timeout, 10*time.Second)
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = DefaultSyncInterval
	}
	opts.SyncInterval = min(max(opts.SyncInterval, 10*time.Millisecond), time.Minute)
	if opts.offset == nil {
		opts.offset = func() time.Duration { return 0 }
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Redis{c: client, opts: opts, log: log, seal: seal,
		blocks: map[string]pendingBlock{}, adds: map[string]Credential{}, known: map[string]known{},
		done: make(chan struct{})}
	r.local = NewMemory(MemoryOptions{Now: r.now, RedeemMinBlocked: opts.RedeemMinBlocked})
	r.local.noRedeem = true
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.reconcile()
	return r, nil
}

// ContextTimeouts reports whether a known client type honours context
// deadlines, as ClientOptions sets it (unknown types, such as wrappers, are
// trusted). Every Redis-backed store checks its client with it.
func ContextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// now is the local view's clock.
func (r *Redis) now() time.Time { return time.Now().Add(r.opts.offset()) }

func (r *Redis) keys(providerName string) []string {
	tag := r.opts.KeyPrefix + "{prov:" + providerName + "}:"
	return []string{tag + "creds", tag + "order", tag + "blocks", tag + "meta"}
}

func (r *Redis) providersKey() string { return r.opts.KeyPrefix + "providers" }

// run runs script on providerName's keys with a bounded timeout.
func (r *Redis) run(ctx context.Context, script *redis.Script, providerName string, args ...any) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	argv := append([]any{r.opts.offset().Milliseconds()}, args...)
	res, err := script.Run(ctx, r.c, r.keys(providerName), argv...).Slice()
	if err != nil {
		return nil, fmt.Errorf("credstore: redis: %w", err)
	}
	return res, nil
}

// fail switches to degraded mode after a failed Redis call; it returns the
// caller's own context error instead when that is what ended the call.
func (r *Redis) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.failures.Add(1)
	r.mu.Lock()
	r.lastErr = err
	if !r.degraded.Load() {
		r.since = time.Now()
		r.degraded.Store(true)
		r.log.Warn("credential store: Redis unavailable, serving from the local view", "err", err)
	}
	r.mu.Unlock()
	return nil
}

// Degraded reports whether the store serves from its local view.
func (r *Redis) Degraded() bool { return r.degraded.Load() }

// Ready is nil when Redis answers; while degraded it is an error wrapping
// ErrDegraded (the store still serves from its local view).
func (r *Redis) Ready(ctx context.Context) error {
	if r.degraded.Load() {
		r.mu.Lock()
		defer r.mu.Unlock()
		return fmt.Errorf("%w since %s (serving from the local view): %v",
			ErrDegraded, r.since.UTC().Format(time.RFC3339), r.lastErr)
	}
	ctx2, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if err := r.c.Ping(ctx2).Err(); err != nil {
		if cerr := r.fail(ctx, err); cerr != nil {
			return cerr
		}
		return fmt.Errorf("%w: redis: %v", ErrDegraded, err)
	}
	return nil
}

// Close stops the reconciler and waits for it.
func (r *Redis) Close() error {
	r.closed.Do(func() {
		r.cancel()
		<-r.done
	})
	return nil
}

// Add stores a credential (see Store.Add). While degraded, a configuration
// credential is kept locally and written to Redis when it is back; an API
// credential is ErrUnavailable.
func (r *Redis) Add(ctx context.Context, c Credential) (Info, error) {
	c, err := normalize(c)
	if err != nil {
		return Info{}, err
	}
	if !r.degraded.Load() {
		info, err := r.addRedis(ctx, c)
		if err == nil || !isOutage(err) {
			return info, err
		}
		if cerr := r.fail(ctx, err); cerr != nil {
			return Info{}, cerr
		}
	}
	if c.Source != SourceConfig {
		return Info{}, fmt.Errorf("%w: cannot add %s while Redis is unreachable", ErrUnavailable, c.ID)
	}
	info, err := r.local.Add(ctx, c)
	if err != nil {
		return Info{}, err
	}
	r.mu.Lock()
	r.adds[c.ID] = c
	r.mu.Unlock()
	return info, nil
}

// outageError marks an error of Redis itself (not of the request).
type outageError struct{ err error }

func (e outageError) Error() string { return e.err.Error() }
func (e outageError) Unwrap() error { return e.err }

func isOutage(err error) bool {
	var o outageError
	return errors.As(err, &o)
}

func (r *Redis) addRedis(ctx context.Context, c Credential) (Info, error) {
	// IDs are unique across providers. This check and the add are not one
	// transaction (providers live in different slots): two replicas adding
	// the same ID to two providers at the same instant could both succeed.
	ps, err := r.providerNames(ctx)
	if err != nil {
		return Info{}, outageError{err}
	}
	for _, p := range ps {
		if p == c.Provider {
			continue
		}
		ctx2, cancel := context.WithTimeout(ctx, r.opts.Timeout)
		taken, err := r.c.HExists(ctx2, r.keys(p)[0], c.ID).Result()
		cancel()
		if err != nil {
			return Info{}, outageError{err}
		}
		if taken {
			return Info{}, fmt.Errorf("%w: %s", ErrExists, c.ID)
		}
	}
	ctx2, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	err = r.c.SAdd(ctx2, r.providersKey(), c.Provider).Err()
	cancel()
	if err != nil {
		return Info{}, outageError{err}
	}
	sealed, err := r.seal.seal(c.Provider, c.ID, c.Secret)
	if err != nil {
		return Info{}, err
	}
	res, err := r.run(ctx, addScript, c.Provider, c.ID, sealed, c.Source, c.BankedResets, b2i(c.AutoRedeem), randomHex(8))
	if err != nil {
		return Info{}, outageError{err}
	}
	if len(res) < 2 {
		return Info{}, fmt.Errorf("credstore: redis: unexpected reply to add")
	}
	if str(res[0]) == "exists" {
		return Info{}, fmt.Errorf("%w: %s", ErrExists, c.ID)
	}
	if len(res) < 6 {
		return Info{}, fmt.Errorf("credstore: redis: unexpected reply to add")
	}
	now := r.now()
	mc := memCred{Credential: c, seed: c.BankedResets}
	mc.BankedResets = int(num(res[2]))
	if left := num(res[3]); left > 0 {
		mc.until, mc.reason, mc.est = now.Add(time.Duration(left)*time.Millisecond), str(res[4]), num(res[5]) == 1
	}
	r.local.put(mc)
	r.mu.Lock()
	if k := r.known[c.Provider]; k.epoch == "" {
		r.known[c.Provider] = known{epoch: str(res[1])}
	}
	r.mu.Unlock()
	return mc.info(now), nil
}

// Delete removes an API credential; ErrUnavailable while degraded.
func (r *Redis) Delete(ctx context.Context, id string) error {
	if r.degraded.Load() {
		return fmt.Errorf("%w: cannot delete %s while Redis is unreachable", ErrUnavailable, id)
	}
	ps, err := r.providerNames(ctx)
	if err != nil {
		if cerr := r.fail(ctx, err); cerr != nil {
			return cerr
		}
		return fmt.Errorf("%w: cannot delete %s while Redis is unreachable", ErrUnavailable, id)
	}
	if p, ok := r.local.providerOf(id); ok {
		ps = slices.Insert(slices.DeleteFunc(ps, func(x string) bool { return x == p }), 0, p)
	}
	for _, p := range ps {
		res, err := r.run(ctx, deleteScript, p, id)
		if err != nil {
			if cerr := r.fail(ctx, err); cerr != nil {
				return cerr
			}
			return fmt.Errorf("%w: cannot delete %s while Redis is unreachable", ErrUnavailable, id)
		}
		switch num(one(res)) {
		case 1:
			r.local.forget(id)
			return nil
		case -2:
			return fmt.Errorf("%w: %s (remove it there)", ErrReadOnly, id)
		}
	}
	return fmt.Errorf("%w: %s", ErrNotFound, id)
}

// providerNames lists the providers Redis knows, sorted.
func (r *Redis) providerNames(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	ps, err := r.c.SMembers(ctx, r.providersKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("credstore: redis: %w", err)
	}
	slices.Sort(ps)
	return ps, nil
}

// List returns the credentials' states (from the local view while
// degraded).
func (r *Redis) List(ctx context.Context, providerName string) ([]Info, error) {
	if !r.degraded.Load() {
		infos, err := r.listRedis(ctx, providerName)
		if err == nil {
			return infos, nil
		}
		if cerr := r.fail(ctx, err); cerr != nil {
			return nil, cerr
		}
	}
	return r.local.List(ctx, providerName)
}

func (r *Redis) listRedis(ctx context.Context, providerName string) ([]Info, error) {
	ps := []string{providerName}
	if providerName == "" {
		var err error
		if ps, err = r.providerNames(ctx); err != nil {
			return nil, err
		}
	}
	var out []Info
	for _, p := range ps {
		res, err := r.run(ctx, readScript, p, 0, "", "")
		if err != nil {
			return nil, err
		}
		snap, _, _, _, err := r.parseRead(p, res, false)
		if err != nil {
			return nil, err
		}
		now := r.now()
		for i := range snap {
			out = append(out, snap[i].info(now))
		}
	}
	return out, nil
}

// parseRead decodes readScript's reply: the credentials (secrets opened
// when withSecrets; a secret that cannot be opened skips its credential),
// epoch, version and whether anything was listed.
func (r *Redis) parseRead(providerName string, res []any, withSecrets bool) (snap []memCred, epoch, ver string, full bool, err error) {
	if len(res) < 3 || (len(res)-3)%9 != 0 {
		return nil, "", "", false, fmt.Errorf("credstore: redis: unexpected reply to read")
	}
	epoch, ver, full = str(res[0]), str(res[1]), num(res[2]) == 1
	now := r.now()
	for i := 3; i < len(res); i += 9 {
		f := res[i : i+9]
		c := memCred{Credential: Credential{ID: str(f[0]), Provider: providerName, Source: str(f[1]),
			BankedResets: int(num(f[2])), AutoRedeem: num(f[3]) == 1}, seed: int(num(f[4]))}
		if left := num(f[5]); left > 0 {
			c.until, c.reason, c.est = now.Add(time.Duration(left)*time.Millisecond), str(f[6]), num(f[7]) == 1
		}
		if withSecrets {
			s, err := r.seal.open(providerName, c.ID, str(f[8]))
			if err != nil {
				r.log.Warn("credential store: skipping a credential whose secret cannot be opened", "provider", providerName, "id", c.ID, "err", err)
				continue
			}
			c.Secret = s
		}
		snap = append(snap, c)
	}
	return snap, epoch, ver, full, nil
}

// Pick returns the next available credential (from the local view while
// degraded).
func (r *Redis) Pick(ctx context.Context, providerName string) (provider.Credential, bool, error) {
	if !r.degraded.Load() {
		res, err := r.run(ctx, pickScript, providerName)
		if err == nil {
			return r.parsePick(providerName, res)
		}
		if cerr := r.fail(ctx, err); cerr != nil {
			return provider.Credential{}, false, cerr
		}
	}
	return r.local.Pick(ctx, providerName)
}

func (r *Redis) parsePick(providerName string, res []any) (provider.Credential, bool, error) {
	switch {
	case len(res) == 0:
		// Redis has no credential for the provider: they were all deleted
		// since the last sync, or Redis lost its data and the reconciler
		// has not restored it yet. The local view answers either way.
		return r.local.Pick(context.Background(), providerName)
	case len(res) == 3 && num(res[0]) == 1:
		id := str(res[1])
		s, err := r.seal.open(providerName, id, str(res[2]))
		if err != nil {
			return provider.Credential{}, true, err
		}
		return provider.Credential{ID: id, Secret: s}, true, nil
	case len(res) == 2 && num(res[0]) == 0:
		in := time.Duration(num(res[1])) * time.Millisecond
		return provider.Credential{}, true, &AllBlockedError{Provider: providerName, Until: r.now().Add(in), In: in}
	}
	return provider.Credential{}, false, fmt.Errorf("credstore: redis: unexpected reply to pick")
}

// UsageLimited is step 7 (see Store.UsageLimited). While degraded the block
// is recorded locally (and written to Redis when it is back) and the switch
// is decided on the local view, without redeeming.
func (r *Redis) UsageLimited(ctx context.Context, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error) {
	window = normWindow(window)
	reason = sanitizeReason(reason, r.local.secretOf(credID))
	if !r.degraded.Load() {
		sw, err := r.usageLimitedRedis(ctx, providerName, credID, window, fromProvider, reason)
		switch {
		case errors.Is(err, errUnknownInRedis):
			if p, ok := r.local.providerOf(credID); !ok || p != providerName {
				return Switch{}, fmt.Errorf("%w: %s", ErrNotFound, credID)
			}
			// Known locally: Redis lost its data (the reconciler restores
			// it) or another replica deleted it since the last sync.
			return r.usageLimitedLocal(ctx, providerName, credID, window, fromProvider, reason)
		case err == nil || !isOutage(err):
			return sw, err
		}
		if cerr := r.fail(ctx, err); cerr != nil {
			return Switch{}, cerr
		}
	}
	return r.usageLimitedLocal(ctx, providerName, credID, window, fromProvider, reason)
}

// errUnknownInRedis: usageLimitedScript did not find the credential.
var errUnknownInRedis = errors.New("credential unknown to Redis")

// usageLimitedLocal records a block in the local view and in the blocks to
// write back to Redis, and decides the switch on the local view.
func (r *Redis) usageLimitedLocal(ctx context.Context, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error) {
	if p, ok := r.local.providerOf(credID); ok && p != providerName {
		return Switch{}, fmt.Errorf("%w: %s", ErrNotFound, credID)
	}
	until := r.now().Add(window)
	r.mu.Lock()
	k := providerName + "\x00" + credID
	if old, ok := r.blocks[k]; !ok || until.After(old.until) || (old.est && fromProvider) {
		r.blocks[k] = pendingBlock{provider: providerName, id: credID, reason: reason, until: until, est: !fromProvider}
	}
	r.mu.Unlock()
	sw, err := r.local.UsageLimited(ctx, providerName, credID, window, fromProvider, reason)
	if errors.Is(err, ErrNotFound) {
		// Not in the local view yet (added elsewhere since the last sync):
		// the block still goes to Redis when it is back.
		return Switch{}, nil
	}
	return sw, err
}

func (r *Redis) usageLimitedRedis(ctx context.Context, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error) {
	res, err := r.run(ctx, usageLimitedScript, providerName, credID, window.Milliseconds(), b2i(!fromProvider),
		reason, r.opts.RedeemMinBlocked.Milliseconds(), randomHex(8))
	if err != nil {
		return Switch{}, outageError{err}
	}
	if len(res) == 0 {
		return Switch{}, fmt.Errorf("credstore: redis: unexpected reply to usage-limited")
	}
	now := r.now()
	ms := func(v any) time.Duration { return time.Duration(num(v)) * time.Millisecond }
	var sw Switch
	var left time.Duration
	switch status := num(res[0]); {
	case status == -1:
		return Switch{}, errUnknownInRedis
	case (status == 1 && len(res) == 4) || (status == 2 && len(res) == 5):
		to := str(res[1])
		s, err := r.seal.open(providerName, to, str(res[2]))
		if err != nil {
			return Switch{}, err
		}
		sw = Switch{Switched: true, To: provider.Credential{ID: to, Secret: s}}
		left = ms(res[3])
		if status == 2 {
			sw.Redeemed, sw.BankedLeft = true, int(num(res[4]))
			r.local.mirrorRedeem(to, sw.BankedLeft)
		}
	case status == 0 && len(res) == 4:
		left = ms(res[1])
		sw.HasSibling, sw.SiblingFreeIn = num(res[2]) == 1, ms(res[3])
	default:
		return Switch{}, fmt.Errorf("credstore: redis: unexpected reply to usage-limited")
	}
	if left > 0 {
		r.local.mirrorBlock(credID, now.Add(left), reason, !fromProvider)
	}
	return sw, nil
}

// reconcile runs sync every SyncInterval until Close.
func (r *Redis) reconcile() {
	defer close(r.done)
	t := time.NewTicker(r.opts.SyncInterval)
	defer t.Stop()
	for {
		r.sync(r.ctx)
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sync probes Redis, writes back what was recorded while it was
// unreachable, refreshes the local view (restoring Redis from it if Redis
// lost its data), and leaves degraded mode when all of that worked.
func (r *Redis) sync(ctx context.Context) {
	failures := r.failures.Load()
	err := r.syncOnce(ctx)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		_ = r.fail(ctx, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.degraded.Load() && len(r.blocks) == 0 && len(r.adds) == 0 && r.failures.Load() == failures {
		r.degraded.Store(false)
		r.lastErr = nil
		r.log.Info("credential store: Redis is back", "degraded_for", time.Since(r.since).Round(time.Millisecond))
	}
}

func (r *Redis) syncOnce(ctx context.Context) error {
	ctx2, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	err := r.c.Ping(ctx2).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("credstore: redis: %w", err)
	}
	if err := r.flush(ctx); err != nil {
		return err
	}
	ps, err := r.providerNames(ctx)
	if err != nil {
		return err
	}
	for _, p := range r.local.providers() {
		if !slices.Contains(ps, p) {
			// Known locally but not listed: Redis lost the set.
			ctx2, cancel := context.WithTimeout(ctx, r.opts.Timeout)
			err := r.c.SAdd(ctx2, r.providersKey(), p).Err()
			cancel()
			if err != nil {
				return fmt.Errorf("credstore: redis: %w", err)
			}
			ps = append(ps, p)
		}
	}
	for _, p := range ps {
		if err := r.refresh(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// flush writes back the configuration credentials added and the blocks
// made while Redis was unreachable.
func (r *Redis) flush(ctx context.Context) error {
	r.mu.Lock()
	adds := make([]Credential, 0, len(r.adds))
	for _, c := range r.adds {
		adds = append(adds, c)
	}
	blocks := make([]pendingBlock, 0, len(r.blocks))
	for _, b := range r.blocks {
		blocks = append(blocks, b)
	}
	r.mu.Unlock()

	for _, c := range adds {
		if _, err := r.addRedis(ctx, c); err != nil && isOutage(err) {
			return err
		} else if err != nil {
			r.log.Warn("credential store: a configuration credential added while Redis was unreachable was refused", "id", c.ID, "err", err)
		}
		r.mu.Lock()
		if r.adds[c.ID] == c {
			delete(r.adds, c.ID)
		}
		r.mu.Unlock()
	}
	for _, b := range blocks {
		if left := b.until.Sub(r.now()).Truncate(time.Millisecond); left > 0 {
			if _, err := r.run(ctx, blockScript, b.provider, b.id, left.Milliseconds(), b2i(b.est), b.reason, randomHex(8)); err != nil {
				return err
			}
		}
		r.mu.Lock()
		if k := b.provider + "\x00" + b.id; r.blocks[k] == b {
			delete(r.blocks, k)
		}
		r.mu.Unlock()
	}
	return nil
}

// refresh reads providerName's state into the local view when it changed,
// first restoring Redis from the local view if Redis lost it.
func (r *Redis) refresh(ctx context.Context, providerName string) error {
	r.mu.Lock()
	k := r.known[providerName]
	r.mu.Unlock()
	since := r.local.generation()
	res, err := r.run(ctx, readScript, providerName, 1, k.epoch, k.ver)
	if err != nil {
		return err
	}
	snap, epoch, ver, full, err := r.parseRead(providerName, res, true)
	if err != nil {
		return err
	}
	if k.epoch != "" && epoch != k.epoch {
		if local := r.local.snapshot(providerName); len(local) > 0 {
			if err := r.restore(ctx, providerName, k.epoch, local); err != nil {
				return err
			}
			since = r.local.generation()
			if res, err = r.run(ctx, readScript, providerName, 1, "", ""); err != nil {
				return err
			}
			if snap, epoch, ver, full, err = r.parseRead(providerName, res, true); err != nil {
				return err
			}
		}
	}
	if full {
		r.local.replace(providerName, snap, since)
	}
	r.mu.Lock()
	if r.known[providerName] == k {
		// (Unless an add recorded the epoch meanwhile: this read may be
		// older than that add.)
		r.known[providerName] = known{epoch: epoch, ver: ver}
	}
	r.mu.Unlock()
	return nil
}

// restore puts the local view of providerName back into Redis after Redis
// lost it.
func (r *Redis) restore(ctx context.Context, providerName, knownEpoch string, local []memCred) error {
	now := r.now()
	args := []any{randomHex(8), knownEpoch, len(local)}
	for _, c := range local {
		sealed, err := r.seal.seal(providerName, c.ID, c.Secret)
		if err != nil {
			return err
		}
		left := int64(0)
		if c.blocked(now) {
			left = max(1, c.until.Sub(now).Milliseconds())
		}
		args = append(args, c.ID, sealed, c.Source, c.BankedResets, b2i(c.AutoRedeem), c.seed, left, c.reason, b2i(c.est))
	}
	res, err := r.run(ctx, restoreScript, providerName, args...)
	if err != nil {
		return err
	}
	if len(res) == 2 && num(res[1]) > 0 {
		r.log.Warn("credential store: Redis had lost credentials; restored them from the local view",
			"provider", providerName, "restored", num(res[1]))
	}
	return nil
}

// Reply helpers.

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func one(res []any) any {
	if len(res) == 1 {
		return res[0]
	}
	return nil
}

func num(v any) int64 {
	switch v := v.(type) {
	case int64:
		return v
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}
