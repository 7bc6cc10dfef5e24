package cooldown

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the registry shared by every replica: one sorted set
// <prefix>{cooldowns}:models of provider/model → end of cooldown (ms on
// Redis' clock), so that every replica stops sending to a model another one
// saw failing, and restores it at the same moment. When Redis is
// unreachable it falls back to a local registry (and merges nothing back:
// cooldowns are short-lived).
type Redis struct {
	c     redis.Scripter
	key   string
	now   func() time.Time
	local *Memory
}

// suppressScript raises a model's cooldown end.
//
//	KEYS[1]  <prefix>{cooldowns}:models  ZSET model → end (ms, Redis clock)
//	ARGV[1]  model
//	ARGV[2]  cooldown length, ms
//
// It drops expired entries and returns nothing.
var suppressScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], 'GT', now + tonumber(ARGV[2]), ARGV[1])
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
// (credstore.ClientOptions). now is the local clock of returned times.
func NewRedis(client redis.Scripter, keyPrefix string, now func() time.Time) *Redis {
	if now == nil {
		now = time.Now
	}
	return &Redis{c: client, key: keyPrefix + "{cooldowns}:models", now: now, local: NewMemory(now)}
}

// Suppress puts model in cooldown until until.
func (r *Redis) Suppress(ctx context.Context, model string, until time.Time) error {
	_ = r.local.Suppress(ctx, model, until)
	d := until.Sub(r.now()).Milliseconds()
	if d <= 0 {
		return nil
	}
	if err := suppressScript.Run(ctx, r.c, []string{r.key}, model, d).Err(); err != nil {
		return fmt.Errorf("cooldown: suppress %s: %w (kept locally)", model, err)
	}
	return nil
}

// SuppressedUntil is the end of model's cooldown, zero when none. When
// Redis is unreachable it answers from the local registry.
func (r *Redis) SuppressedUntil(ctx context.Context, model string) (time.Time, error) {
	m, err := r.remaining(ctx, model)
	if err != nil {
		u, _ := r.local.SuppressedUntil(ctx, model)
		return u, nil
	}
	return m[model], nil
}

// Active returns every model cooling down now and the end of its cooldown.
func (r *Redis) Active(ctx context.Context) (map[string]time.Time, error) {
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
