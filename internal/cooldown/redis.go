package cooldown

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the registry shared by every replica: one sorted set
// <prefix>{cooldowns}:models of provider/model → end of cooldown (ms on
// Redis' clock), so that every replica stops sending to a model another one
// saw failing, and restores it at the same moment. When Redis is
// unreachable it falls back to a local registry; a cooldown it could not
// record there is recorded once Redis answers again (before anything else
// is asked of it), so neither this replica nor the others forget it.
type Redis struct {
	c             redis.Scripter
	key           string
	circuit       string // <prefix>{cooldowns}:circuit
	probePrefix   string // <prefix>{cooldowns}:probe:
	settledPrefix string // <prefix>{cooldowns}:settled: (settleScript)
	probeTTL      time.Duration
	now           func() time.Time
	local         *Memory

	// unsent are the cooldowns Suppress could not record in Redis, by
	// model (the latest end); pending says there are some.
	mu      sync.Mutex
	unsent  map[string]time.Time
	pending atomic.Bool
}

// suppressScript raises a model's cooldown end.
//
//	KEYS[1]  <prefix>{cooldowns}:models  ZSET model → end (ms, Redis clock)
//	KEYS[2]  <prefix>{cooldowns}:circuit HASH: the model's circuit opens (a
//	         probe closes it after the cooldown)
//	ARGV[1]  model
//	ARGV[2]  cooldown length, ms
//
// It drops expired entries and returns nothing.
var suppressScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], 'GT', now + tonumber(ARGV[2]), ARGV[1])
if KEYS[2] then redis.call('HSETNX', KEYS[2], ARGV[1], 0) end
return 0
`)

// remainingScript returns the time left of cooldowns.
//
//	KEYS[1]  <prefix>{cooldowns}:models
//	ARGV[1]  model, or "" for every model
//
// It returns a flat array model, remaining ms, … of the models still
// cooling down.
var remainingScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
if ARGV[1] ~= '' then
  local e = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if e and tonumber(e) > now then
    out[1] = ARGV[1]
    out[2] = tostring(tonumber(e) - now)
  end
  return out
end
local all = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #all, 2 do
  out[#out + 1] = all[i]
  out[#out + 1] = tostring(tonumber(all[i + 1]) - now)
end
return out
`)

// NewRedis returns the shared registry; client must have bounded timeouts
// (redisconn.ClientOptions). now is the local clock of returned times.
func NewRedis(client redis.Scripter, keyPrefix string, now func() time.Time) *Redis {
	if now == nil {
		now = time.Now
	}
	return &Redis{c: client, key: keyPrefix + "{cooldowns}:models", circuit: keyPrefix + "{cooldowns}:circuit",
		probePrefix: keyPrefix + "{cooldowns}:probe:", settledPrefix: keyPrefix + "{cooldowns}:settled:", probeTTL: DefaultProbeTTL, now: now, local: NewMemory(now)}
}

// SetProbeTTL sets how long a probe claim lasts (DefaultProbeTTL); tests
// shorten it.
func (r *Redis) SetProbeTTL(d time.Duration) {
	r.probeTTL = d
	r.local.SetProbeTTL(d)
}

// Suppress puts model in cooldown until until.
func (r *Redis) Suppress(ctx context.Context, model string, until time.Time) error {
	_ = r.local.Suppress(ctx, model, until)
	r.sendUnsent(ctx)
	if err := r.suppress(ctx, model, until); err != nil {
		r.keepUnsent(model, until)
		return fmt.Errorf("cooldown: suppress %s: %w (kept locally, recorded once Redis answers)", model, err)
	}
	return nil
}

// suppress records model's cooldown in Redis (nothing when it has ended).
func (r *Redis) suppress(ctx context.Context, model string, until time.Time) error {
	d := until.Sub(r.now()).Milliseconds()
	if d <= 0 {
		return nil
	}
	return suppressScript.Run(ctx, r.c, []string{r.key, r.circuit}, model, d).Err()
}

// keepUnsent holds model's cooldown for sendUnsent.
func (r *Redis) keepUnsent(model string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unsent == nil {
		r.unsent = map[string]time.Time{}
	}
	if until.After(r.unsent[model]) {
		r.unsent[model] = until
	}
	r.pending.Store(true)
}

// sendUnsent records in Redis the cooldowns Suppress could not, those not
// ended yet (one script run each; nothing to do, the usual case, costs an
// atomic load). It stops at the first failure: Redis is still away.
func (r *Redis) sendUnsent(ctx context.Context) {
	if !r.pending.Load() {
		return
	}
	r.mu.Lock()
	unsent := r.unsent
	r.unsent = nil
	r.pending.Store(false)
	r.mu.Unlock()
	for model, until := range unsent {
		if err := r.suppress(ctx, model, until); err != nil {
			for m, u := range unsent {
				r.keepUnsent(m, u)
			}
			return
		}
		delete(unsent, model)
	}
}

// SuppressedUntil is the end of model's cooldown, zero when none. When
// Redis is unreachable it answers from the local registry.
func (r *Redis) SuppressedUntil(ctx context.Context, model string) (time.Time, error) {
	r.sendUnsent(ctx)
	m, err := r.remaining(ctx, model)
	if err != nil {
		u, _ := r.local.SuppressedUntil(ctx, model)
		return u, nil //nolint:nilerr // Redis unreachable: the local registry answers, as documented
	}
	return m[model], nil
}

// Active returns every model cooling down now and the end of its cooldown.
func (r *Redis) Active(ctx context.Context) (map[string]time.Time, error) {
	r.sendUnsent(ctx)
	m, err := r.remaining(ctx, "")
	if err != nil {
		return r.local.Active(ctx)
	}
	return m, nil
}

func (r *Redis) remaining(ctx context.Context, model string) (map[string]time.Time, error) {
	vals, err := remainingScript.Run(ctx, r.c, []string{r.key}, model).StringSlice()
	if err != nil {
		return nil, err
	}
	now := r.now()
	out := make(map[string]time.Time, len(vals)/2)
	for i := 0; i+1 < len(vals); i += 2 {
		var ms int64
		if _, err := fmt.Sscan(vals[i+1], &ms); err == nil {
			out[vals[i]] = now.Add(time.Duration(ms) * time.Millisecond)
		}
	}
	return out, nil
}

// admitScript answers Admit in one round trip.
//
//	KEYS[1]     <prefix>{cooldowns}:models        ZSET name → end of cooldown
//	KEYS[2]     <prefix>{cooldowns}:circuit       HASH name → failed probes (open circuits)
//	KEYS[3..]   <prefix>{cooldowns}:probe:<name>  each name's probe claim (token, with a TTL)
//	ARGV[1]     probe TTL, ms
//	ARGV[2]     token for a new claim
//	ARGV[3..]   the names, in KEYS[3..]'s order
//
// It returns {0} (a name cooling, or another caller probes), {1} (allowed)
// or {2, i} (this caller's probe of the i-th name: a claim made, or made
// by this very call, run again after its reply was lost).
var admitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 3, #ARGV do
  local e = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if e and tonumber(e) > now then return {0} end
end
for i = 3, #ARGV do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 1 then
    if redis.call('SET', KEYS[i], ARGV[2], 'NX', 'PX', ARGV[1]) then return {2, i - 2} end
    if redis.call('GET', KEYS[i]) == ARGV[2] then return {2, i - 2} end
    return {0}
  end
end
return {1}
`)

// settleScript ends a probe.
//
//	KEYS[1..3]  as admitScript
//	KEYS[4]     <prefix>{cooldowns}:settled:<token> the token settled (60 s)
//	ARGV[1]     model
//	ARGV[2]     token
//	ARGV[3]     outcome: success, failure or released
//	ARGV[4]     the failure's cooldown, ms
//	ARGV[5]     the cap of a failure's cooldown, ms
//
// A success closes the circuit (if the token still holds the probe); a
// failure doubles the cooldown per failed probe (capped) and raises the
// model's cooldown end to it; the claim is dropped if the token holds it.
// A token settled already (this very call, run again after its reply was
// lost) settles nothing: a failure counts once, whatever other replicas
// settled in between (each token has a key of its own).
var settleScript = redis.NewScript(`
if ARGV[2] ~= '' then
  if redis.call('GET', KEYS[4]) == ARGV[2] then return 0 end
  redis.call('SET', KEYS[4], ARGV[2], 'PX', 60000)
end
local held = redis.call('GET', KEYS[3]) == ARGV[2]
if held then redis.call('DEL', KEYS[3]) end
if ARGV[3] == 'success' then
  if held then redis.call('HDEL', KEYS[2], ARGV[1]) end
elseif ARGV[3] == 'failure' then
  local n = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
  local d = tonumber(ARGV[4])
  local cap = tonumber(ARGV[5])
  for i = 1, n do
    if d >= cap then break end
    d = d * 2
  end
  d = math.min(d, cap)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[1], 'GT', now + d, ARGV[1])
end
return 0
`)

func (r *Redis) probeKeys(model string) []string {
	return []string{r.key, r.circuit, r.probePrefix + model}
}

// Admit is Memory.Admit across every replica: one script run. When Redis
// is unreachable it answers from the local registry.
func (r *Redis) Admit(ctx context.Context, names ...string) (Admission, error) {
	r.sendUnsent(ctx)
	tok := newToken()
	keys := make([]string, 2, 2+len(names))
	keys[0], keys[1] = r.key, r.circuit
	args := make([]any, 2, 2+len(names))
	args[0], args[1] = r.probeTTL.Milliseconds(), tok
	for _, n := range names {
		keys = append(keys, r.probePrefix+n)
		args = append(args, n)
	}
	res, err := admitScript.Run(ctx, r.c, keys, args...).Int64Slice()
	if err != nil || len(res) == 0 {
		return r.local.Admit(ctx, names...)
	}
	switch {
	case res[0] == 1:
		return Admission{Allowed: true}, nil
	case res[0] == 2 && len(res) == 2 && res[1] >= 1 && int(res[1]) <= len(names):
		return Admission{Allowed: true, Probe: true, Token: tok, Name: names[res[1]-1]}, nil
	}
	return Admission{}, nil
}

// Settle is Memory.Settle across every replica.
func (r *Redis) Settle(ctx context.Context, model, token, outcome string, cooldown time.Duration) error {
	_ = r.local.Settle(ctx, model, token, outcome, cooldown)
	keys := append(r.probeKeys(model), r.settledPrefix+token)
	if err := settleScript.Run(ctx, r.c, keys, model, token, outcome, cooldown.Milliseconds(), MaxProbeCooldown.Milliseconds()).Err(); err != nil {
		if u, _ := r.local.SuppressedUntil(ctx, model); outcome == ProbeFailure && !u.IsZero() {
			r.keepUnsent(model, u) // the failed probe's cooldown, for the fleet
		}
		return fmt.Errorf("cooldown: settle the probe of %s: %w", model, err)
	}
	return nil
}

// newToken is a probe claim's token.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
