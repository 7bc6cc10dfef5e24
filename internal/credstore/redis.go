package credstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/redisconn"
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
	// MaxPerOwner: see MemoryOptions. The add script counts the tenant's
	// credentials of the provider, so the bound holds across replicas.
	MaxPerOwner int
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
	DefaultTimeout      = redisconn.DefaultTimeout // a Redis call's bound, as the client's
	DefaultSyncInterval = time.Second
)

// Redis is the credential store shared by every replica through Redis
// (single node, Sentinel or Cluster through a redis.UniversalClient).
//
// What Redis holds, per provider P (all keys of P share the hash tag
// {prov:P}, hence one Cluster slot):
//
//	<prefix>{prov:P}:creds   HASH  id → secret (sealed with SecretKey, else clear), source, banked resets, auto-redeem, account
//	<prefix>{prov:P}:order   ZSET  rotation order
//	<prefix>{prov:P}:blocks  HASH  id → blocked-until (Redis clock, ms), reason; TTL = the latest block's end
//	<prefix>{prov:P}:meta    HASH  add sequence, rotation cursors, version, epoch
//	<prefix>{prov:P}:owners  SET   tenants with credentials of their own for P
//	<prefix>{prov:P}:own:T:creds, …:order, …:blocks   tenant T's own credentials of P, as the three above
//	<prefix>providers        SET   provider names (for listing every provider)
//
// The first three hold the server credentials. A pick or a usage limit of
// a tenant's session is one script on the provider's keys and the
// tenant's three (one round trip, one slot). Only the :blocks keys have a
// TTL; the rest lives as long as its credentials. Block
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
	blocks  map[string]pendingBlock // "tenant\x00provider\x00id" → block made while degraded
	adds    map[string]Credential   // id → configuration credential added while degraded
	known   map[string]known        // provider → last epoch, version and owners read

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

// pendingBlock is a block made while degraded, in tenant's pool (Redis
// resolves the credential in that pool when it is replayed).
type pendingBlock struct {
	tenant, provider, id, reason string
	until                        time.Time // local view's clock
	est                          bool
}

type known struct {
	epoch, ver string
	owners     string // the tenants owning credentials, sorted, joined by "\x00"
}

func (k known) ownerList() []string {
	if k.owners == "" {
		return nil
	}
	return strings.Split(k.owners, "\x00")
}

// ClientOptions is redisconn.ClientOptions, kept for the callers that
// still name it here.
func ClientOptions(o *redis.UniversalOptions, timeout time.Duration) *redis.UniversalOptions {
	return redisconn.ClientOptions(o, timeout)
}

// NewRedis returns a store on client and starts its reconciler (Close
// stops it). The client must honour context deadlines (see
// redisconn.ClientOptions);
// the store does not close it. NewRedis does not wait for Redis: if it is
// down, the store starts degraded.
func NewRedis(client redis.UniversalClient, opts RedisOptions) (*Redis, error) {
	if client == nil {
		return nil, errors.New("credstore: nil Redis client")
	}
	if !redisconn.ContextTimeouts(client) {
		return nil, errors.New("credstore: the Redis client must be created with ContextTimeoutEnabled (see redisconn.ClientOptions), or a dead Redis could hold requests")
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

// ContextTimeouts is redisconn.ContextTimeouts, kept for the callers that
// still name it here.
func ContextTimeouts(c redis.UniversalClient) bool { return redisconn.ContextTimeouts(c) }

// now is the local view's clock.
func (r *Redis) now() time.Time { return time.Now().Add(r.opts.offset()) }

// keys are providerName's five keys, then the three of each tenant given
// (see redis_scripts.go).
func (r *Redis) keys(providerName string, tenants ...string) []string {
	tag := r.opts.KeyPrefix + "{prov:" + providerName + "}:"
	out := make([]string, 0, 5+3*len(tenants))
	out = append(out, tag+"creds", tag+"order", tag+"blocks", tag+"meta", tag+"owners")
	for _, t := range tenants {
		own := tag + "own:" + t + ":"
		out = append(out, own+"creds", own+"order", own+"blocks")
	}
	return out
}

// poolKeys are the keys of a script serving tenant's pool ("": the
// server's alone).
func (r *Redis) poolKeys(providerName, tenant string) []string {
	if tenant == "" {
		return r.keys(providerName)
	}
	return r.keys(providerName, tenant)
}

// onceKeys are poolKeys and then a new key of the call's own, in the
// provider's slot, for the scripts made with once.
func (r *Redis) onceKeys(providerName, tenant string) []string {
	return append(r.poolKeys(providerName, tenant), r.opts.KeyPrefix+"{prov:"+providerName+"}:once:"+randomHex(8))
}

// credsKey is owner's creds hash of providerName.
func (r *Redis) credsKey(providerName, owner string) string {
	if owner == "" {
		return r.keys(providerName)[0]
	}
	return r.keys(providerName, owner)[5]
}

func (r *Redis) providersKey() string { return r.opts.KeyPrefix + "providers" }

// run runs script on keys with a bounded timeout.
func (r *Redis) run(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	argv := append([]any{r.opts.offset().Milliseconds()}, args...)
	res, err := script.Run(ctx, r.c, keys, argv...).Slice()
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
	// IDs are unique across providers within an owner, and a tenant's are
	// not a server credential's (the add script checks the provider's own).
	// This check and the add are not one transaction (providers live in
	// different slots): two replicas adding the same ID to two providers at
	// the same instant could both succeed.
	ps, err := r.providerNames(ctx)
	if err != nil {
		return Info{}, outageError{err}
	}
	for _, p := range ps {
		var check []string
		if p != c.Provider {
			check = append(check, r.credsKey(p, c.Owner))
		}
		if c.Owner != "" && p != c.Provider {
			check = append(check, r.credsKey(p, ""))
		}
		for _, key := range check {
			ctx2, cancel := context.WithTimeout(ctx, r.opts.Timeout)
			taken, err := r.c.HExists(ctx2, key, c.ID).Result()
			cancel()
			if err != nil {
				return Info{}, outageError{err}
			}
			if taken {
				return Info{}, fmt.Errorf("%w: %s", ErrExists, c.ID)
			}
		}
	}
	ctx2, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	err = r.c.SAdd(ctx2, r.providersKey(), c.Provider).Err()
	cancel()
	if err != nil {
		return Info{}, outageError{err}
	}
	sealed, err := r.seal.seal(c.Provider, c.Owner, c.ID, c.Secret)
	if err != nil {
		return Info{}, err
	}
	res, err := r.run(ctx, addScript, r.onceKeys(c.Provider, c.Owner), c.Owner, c.ID, sealed, c.Source, c.BankedResets, b2i(c.AutoRedeem), randomHex(8), c.Account, max(0, r.opts.MaxPerOwner))
	if err != nil {
		return Info{}, outageError{err}
	}
	if len(res) < 2 {
		return Info{}, fmt.Errorf("credstore: redis: unexpected reply to add")
	}
	switch str(res[0]) {
	case "exists":
		return Info{}, fmt.Errorf("%w: %s", ErrExists, c.ID)
	case "limit":
		return Info{}, &LimitError{Provider: c.Provider, Limit: r.opts.MaxPerOwner}
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

// Delete removes owner's API credential; ErrUnavailable while degraded.
func (r *Redis) Delete(ctx context.Context, owner, id string) error {
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
	if p, ok := r.local.providerOf(owner, id); ok {
		ps = slices.Insert(slices.DeleteFunc(ps, func(x string) bool { return x == p }), 0, p)
	}
	forbidden := false
	for _, p := range ps {
		res, err := r.run(ctx, deleteScript, r.onceKeys(p, owner), owner, id)
		if err != nil {
			if cerr := r.fail(ctx, err); cerr != nil {
				return cerr
			}
			return fmt.Errorf("%w: cannot delete %s while Redis is unreachable", ErrUnavailable, id)
		}
		switch num(one(res)) {
		case 1:
			r.local.forget(owner, id)
			return nil
		case -2:
			return fmt.Errorf("%w: %s (remove it there)", ErrReadOnly, id)
		case -3:
			forbidden = true
		}
	}
	if forbidden {
		return fmt.Errorf("%w: %s", ErrForbidden, id)
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
func (r *Redis) List(ctx context.Context, f Filter) ([]Info, error) {
	if !r.degraded.Load() {
		infos, err := r.listRedis(ctx, f)
		if err == nil {
			return infos, nil
		}
		if cerr := r.fail(ctx, err); cerr != nil {
			return nil, cerr
		}
	}
	return r.local.List(ctx, f)
}

func (r *Redis) listRedis(ctx context.Context, f Filter) ([]Info, error) {
	ps := []string{f.Provider}
	if f.Provider == "" {
		var err error
		if ps, err = r.providerNames(ctx); err != nil {
			return nil, err
		}
	}
	var out []Info
	for _, p := range ps {
		var rd readResult
		var err error
		if f.All {
			r.mu.Lock()
			owners := r.known[p].ownerList()
			r.mu.Unlock()
			rd, err = r.readAll(ctx, p, false, "", "", owners)
		} else {
			var tenants []string
			if f.Tenant != "" {
				tenants = []string{f.Tenant}
			}
			rd, err = r.read(ctx, p, false, "", "", false, tenants)
		}
		if err != nil {
			return nil, err
		}
		now := r.now()
		for i := range rd.snap {
			out = append(out, rd.snap[i].info(now))
		}
	}
	return out, nil
}

// readResult is readScript's reply: the credentials (secrets opened when
// asked; a secret that cannot be opened skips its credential), epoch,
// version and whether anything was listed (full), or else the owners to
// ask for (when the ones given were not every owner).
type readResult struct {
	snap       []memCred
	epoch, ver string
	full       bool
	owners     []string // the tenants listed (full), or to ask for
	retry      bool     // the tenants given were not every owner
}

// read runs readScript once for the server's credentials of providerName
// and tenants' (sorted); every: they must be every owner's.
func (r *Redis) read(ctx context.Context, providerName string, withSecrets bool, epoch, ver string, every bool, tenants []string) (readResult, error) {
	args := []any{"", b2i(withSecrets), epoch, ver, b2i(every)}
	for _, t := range tenants {
		args = append(args, t)
	}
	res, err := r.run(ctx, readScript, r.keys(providerName, tenants...), args...)
	if err != nil {
		return readResult{}, err
	}
	return r.parseRead(providerName, res, withSecrets, tenants)
}

// readAll reads every owner's credentials of providerName, starting with
// the owners last seen; when those changed meanwhile it asks again.
func (r *Redis) readAll(ctx context.Context, providerName string, withSecrets bool, epoch, ver string, owners []string) (readResult, error) {
	for attempt := 0; ; attempt++ {
		// The third attempt lists the owners it was told of, changed or
		// not (the next sync sees any newer change through the version).
		rd, err := r.read(ctx, providerName, withSecrets, epoch, ver, attempt < 2, owners)
		if err != nil || !rd.retry {
			return rd, err
		}
		owners = rd.owners
	}
}

func (r *Redis) parseRead(providerName string, res []any, withSecrets bool, tenants []string) (readResult, error) {
	bad := fmt.Errorf("credstore: redis: unexpected reply to read")
	if len(res) < 3 {
		return readResult{}, bad
	}
	rd := readResult{epoch: str(res[0]), ver: str(res[1])}
	switch num(res[2]) {
	case 0:
		return rd, nil
	case 2:
		rd.retry = true
		for _, o := range res[3:] {
			rd.owners = append(rd.owners, str(o))
		}
		return rd, nil
	case 1:
	default:
		return readResult{}, bad
	}
	if (len(res)-3)%11 != 0 {
		return readResult{}, bad
	}
	rd.full, rd.owners = true, tenants
	now := r.now()
	for i := 3; i < len(res); i += 11 {
		f := res[i : i+11]
		c := memCred{Credential: Credential{Owner: str(f[0]), ID: str(f[1]), Provider: providerName, Source: str(f[2]),
			BankedResets: int(num(f[3])), AutoRedeem: num(f[4]) == 1, Account: str(f[10])}, seed: int(num(f[5]))}
		if left := num(f[6]); left > 0 {
			c.until, c.reason, c.est = now.Add(time.Duration(left)*time.Millisecond), str(f[7]), num(f[8]) == 1
		}
		if withSecrets {
			s, err := r.seal.open(providerName, c.Owner, c.ID, str(f[9]))
			if err != nil {
				r.log.Warn("credential store: skipping a credential whose secret cannot be opened",
					"provider", providerName, "id", c.ID, "owner", c.Owner, "err", err)
				continue
			}
			c.Secret = s
		}
		rd.snap = append(rd.snap, c)
	}
	return rd, nil
}

// Pick returns the next available credential of tenant's pool (from the
// local view while degraded): one round trip.
func (r *Redis) Pick(ctx context.Context, tenant, providerName string) (provider.Credential, bool, error) {
	if !r.degraded.Load() {
		res, err := r.run(ctx, pickScript, r.poolKeys(providerName, tenant), tenant)
		if err == nil {
			return r.parsePick(tenant, providerName, res)
		}
		if cerr := r.fail(ctx, err); cerr != nil {
			return provider.Credential{}, false, cerr
		}
	}
	return r.local.Pick(ctx, tenant, providerName)
}

// PickPreferred is Pick keeping prefer when it is in tenant's pool and
// available (see Store.PickPreferred), in the same one round trip.
func (r *Redis) PickPreferred(ctx context.Context, tenant, providerName, prefer string) (provider.Credential, bool, error) {
	if prefer == "" {
		return r.Pick(ctx, tenant, providerName)
	}
	if !r.degraded.Load() {
		res, err := r.run(ctx, pickScript, r.poolKeys(providerName, tenant), tenant, prefer)
		if err == nil {
			return r.parsePick(tenant, providerName, res)
		}
		if cerr := r.fail(ctx, err); cerr != nil {
			return provider.Credential{}, false, cerr
		}
	}
	return r.local.PickPreferred(ctx, tenant, providerName, prefer)
}

// QueuePick queues PickPreferred's script on pipe (another store's
// pipeline on the same client, so that the pick costs no round trip of its
// own) and returns the function that reads its reply once the pipeline
// ran. ok is false, and nothing is queued, while the store is degraded;
// the reply's function reports an error when the pick must be made again
// (the script was unknown, the pipeline failed): the caller picks as usual
// then.
func (r *Redis) QueuePick(ctx context.Context, pipe redis.Pipeliner, tenant, providerName, prefer string) (result func() (provider.Credential, bool, error), ok bool) {
	if r.degraded.Load() {
		return nil, false
	}
	args := []any{r.opts.offset().Milliseconds(), tenant}
	if prefer != "" {
		args = append(args, prefer)
	}
	cmd := pickScript.EvalSha(ctx, pipe, r.poolKeys(providerName, tenant), args...)
	return func() (provider.Credential, bool, error) {
		res, err := cmd.Slice()
		if err != nil {
			return provider.Credential{}, false, fmt.Errorf("credstore: redis: %w", err)
		}
		return r.parsePick(tenant, providerName, res)
	}, true
}

// ownerIf is tenant when own is 1 (a reply's "own" flag), else "" (the
// server).
func ownerIf(own any, tenant string) string {
	if num(own) == 1 {
		return tenant
	}
	return ""
}

func (r *Redis) parsePick(tenant, providerName string, res []any) (provider.Credential, bool, error) {
	switch {
	case len(res) == 0:
		// Redis has no credential for the pool: they were all deleted
		// since the last sync, or Redis lost its data and the reconciler
		// has not restored it yet. The local view answers either way.
		return r.local.Pick(context.Background(), tenant, providerName)
	case len(res) == 5 && num(res[0]) == 1:
		id, owner := str(res[1]), ownerIf(res[3], tenant)
		s, err := r.seal.open(providerName, owner, id, str(res[2]))
		if err != nil {
			return provider.Credential{}, true, err
		}
		return provider.Credential{ID: id, Secret: s, Account: accountOf(str(res[4]), id), Owner: owner}, true, nil
	case len(res) == 2 && num(res[0]) == 0:
		in := time.Duration(num(res[1])) * time.Millisecond
		return provider.Credential{}, true, &AllBlockedError{Provider: providerName, Until: r.now().Add(in), In: in}
	}
	return provider.Credential{}, false, fmt.Errorf("credstore: redis: unexpected reply to pick")
}

// UsageLimited is step 7 in tenant's pool (see Store.UsageLimited). While
// degraded the block is recorded locally (and written to Redis when it is
// back) and the switch is decided on the local view, without redeeming.
func (r *Redis) UsageLimited(ctx context.Context, tenant, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error) {
	window = normWindow(window)
	_, secret, _ := r.local.resolve(tenant, providerName, credID)
	reason = sanitizeReason(reason, secret)
	if !r.degraded.Load() {
		sw, err := r.usageLimitedRedis(ctx, tenant, providerName, credID, window, fromProvider, reason)
		switch {
		case errors.Is(err, errUnknownInRedis):
			if _, _, ok := r.local.resolve(tenant, providerName, credID); !ok {
				return Switch{}, fmt.Errorf("%w: %s", ErrNotFound, credID)
			}
			// Known locally: Redis lost its data (the reconciler restores
			// it) or another replica deleted it since the last sync.
			return r.usageLimitedLocal(ctx, tenant, providerName, credID, window, fromProvider, reason)
		case err == nil || !isOutage(err):
			return sw, err
		}
		if cerr := r.fail(ctx, err); cerr != nil {
			return Switch{}, cerr
		}
	}
	return r.usageLimitedLocal(ctx, tenant, providerName, credID, window, fromProvider, reason)
}

// errUnknownInRedis: usageLimitedScript did not find the credential.
var errUnknownInRedis = errors.New("credential unknown to Redis")

// usageLimitedLocal records a block in the local view and in the blocks to
// write back to Redis, and decides the switch on the local view.
func (r *Redis) usageLimitedLocal(ctx context.Context, tenant, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error) {
	if _, _, ok := r.local.resolve(tenant, providerName, credID); !ok && r.local.knownElsewhere(tenant, providerName, credID) {
		return Switch{}, fmt.Errorf("%w: %s", ErrNotFound, credID)
	}
	until := r.now().Add(window)
	r.mu.Lock()
	k := tenant + "\x00" + providerName + "\x00" + credID
	if old, ok := r.blocks[k]; !ok || until.After(old.until) || (old.est && fromProvider) {
		r.blocks[k] = pendingBlock{tenant: tenant, provider: providerName, id: credID, reason: reason, until: until, est: !fromProvider}
	}
	r.mu.Unlock()
	sw, err := r.local.UsageLimited(ctx, tenant, providerName, credID, window, fromProvider, reason)
	if errors.Is(err, ErrNotFound) {
		// Not in the local view yet (added elsewhere since the last sync):
		// the block still goes to Redis when it is back.
		return Switch{}, nil
	}
	return sw, err
}

func (r *Redis) usageLimitedRedis(ctx context.Context, tenant, providerName, credID string, window time.Duration, fromProvider bool, reason string) (Switch, error) {
	res, err := r.run(ctx, usageLimitedScript, r.onceKeys(providerName, tenant), tenant, credID, window.Milliseconds(), b2i(!fromProvider),
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
	var home string // the owner of credID
	switch status := num(res[0]); {
	case status == -1:
		return Switch{}, errUnknownInRedis
	case (status == 1 && len(res) == 7) || (status == 2 && len(res) == 8):
		to, toOwner := str(res[1]), ownerIf(res[4], tenant)
		if status == 2 {
			toOwner = ownerIf(res[5], tenant)
		}
		home = ownerIf(res[len(res)-2], tenant)
		s, err := r.seal.open(providerName, toOwner, to, str(res[2]))
		if err != nil {
			return Switch{}, err
		}
		sw = Switch{Switched: true, To: provider.Credential{ID: to, Secret: s, Account: accountOf(str(res[len(res)-1]), to), Owner: toOwner}}
		left = ms(res[3])
		if status == 2 {
			sw.Redeemed, sw.BankedLeft = true, int(num(res[4]))
			r.local.mirrorRedeem(toOwner, to, sw.BankedLeft)
		}
	case status == 0 && len(res) == 5:
		left = ms(res[1])
		sw.HasSibling, sw.SiblingFreeIn = num(res[2]) == 1, ms(res[3])
		home = ownerIf(res[4], tenant)
	default:
		return Switch{}, fmt.Errorf("credstore: redis: unexpected reply to usage-limited")
	}
	if left > 0 {
		r.local.mirrorBlock(home, credID, now.Add(left), reason, !fromProvider)
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
			if _, err := r.run(ctx, blockScript, r.poolKeys(b.provider, b.tenant), b.tenant, b.id, left.Milliseconds(),
				b2i(b.est), b.reason, randomHex(8)); err != nil {
				return err
			}
		}
		r.mu.Lock()
		if k := b.tenant + "\x00" + b.provider + "\x00" + b.id; r.blocks[k] == b {
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
	rd, err := r.readAll(ctx, providerName, true, k.epoch, k.ver, k.ownerList())
	if err != nil {
		return err
	}
	if k.epoch != "" && rd.epoch != k.epoch {
		if local := r.local.snapshot(providerName); len(local) > 0 {
			if err := r.restore(ctx, providerName, k.epoch, local); err != nil {
				return err
			}
			since = r.local.generation()
			if rd, err = r.readAll(ctx, providerName, true, "", "", k.ownerList()); err != nil {
				return err
			}
		}
	}
	owners := k.owners
	if rd.full {
		r.local.replace(providerName, rd.snap, since)
		owners = strings.Join(rd.owners, "\x00")
	}
	r.mu.Lock()
	if r.known[providerName] == k {
		// (Unless an add recorded the epoch meanwhile: this read may be
		// older than that add.)
		r.known[providerName] = known{epoch: rd.epoch, ver: rd.ver, owners: owners}
	}
	r.mu.Unlock()
	return nil
}

// restore puts the local view of providerName back into Redis after Redis
// lost it.
func (r *Redis) restore(ctx context.Context, providerName, knownEpoch string, local []memCred) error {
	now := r.now()
	var tenants []string
	index := map[string]int{"": 0}
	for _, c := range local {
		if _, ok := index[c.Owner]; !ok {
			tenants = append(tenants, c.Owner)
			index[c.Owner] = len(tenants)
		}
	}
	args := []any{"", randomHex(8), knownEpoch, len(tenants)}
	for _, t := range tenants {
		args = append(args, t)
	}
	args = append(args, len(local))
	for _, c := range local {
		sealed, err := r.seal.seal(providerName, c.Owner, c.ID, c.Secret)
		if err != nil {
			return err
		}
		left := int64(0)
		if c.blocked(now) {
			left = max(1, c.until.Sub(now).Milliseconds())
		}
		args = append(args, index[c.Owner], c.ID, sealed, c.Source, c.BankedResets, b2i(c.AutoRedeem), c.seed, left, c.reason, b2i(c.est), c.Account)
	}
	res, err := r.run(ctx, restoreScript, r.keys(providerName, tenants...), args...)
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
