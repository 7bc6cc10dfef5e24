package retrybudget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/retry"
)

// DefaultFlushInterval is how often a replica sends Redis the successes it
// counted since the last round trip.
const DefaultFlushInterval = time.Second

// Redis is the budget shared by every replica: one hash
// <prefix>{budget}:tokens of provider/model → level (thousandths of a
// token), holding only the models whose budget is not full. A retry is one
// script run (one round trip) that also carries the successes this
// replica counted for the model; successes of models that are not retried
// travel in one script run every flush interval, and only when there are
// some. A successful call itself never waits for Redis.
//
// When Redis is unreachable the replica decides on a local copy (seeded
// with the levels it last saw), and sends its successes again later.
type Redis struct {
	c     redis.Cmdable
	key   string
	last  string // <prefix>{budget}:last (budgetScript)
	b     retry.Budget
	log   *slog.Logger
	local *Memory

	mu      sync.Mutex
	pending map[string]int64 // successes not yet in Redis, by model

	// The calls' tokens: a random prefix of this process's and a count.
	tokenPrefix string
	tokens      atomic.Uint64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// budgetScript credits successes, then decides a retry.
//
//	KEYS[1]   <prefix>{budget}:tokens  HASH model → level (units); absent: full
//	KEYS[2]   <prefix>{budget}:last    HASH model ("" for a flush) → the last call's token and answer
//	ARGV[1]   full level (units)
//	ARGV[2]   credit of one success (units)
//	ARGV[3]   model whose retry to decide, or "" for none
//	ARGV[4]   the call's token
//	ARGV[5..] model, successes, … to credit first
//
// A token is 1000 units (retry.BudgetScale).
// It returns {allowed (1, 0; -1 without a decision), level after}. The
// same call run again (go-redis sends a command again when its reply was
// lost) finds its token as the last of its model and answers as it did,
// crediting and spending nothing.
var budgetScript = redis.NewScript(`
local last = redis.call('HGET', KEYS[2], ARGV[3])
if last then
  local tok, ok, lvl = string.match(last, '^(%S+) (%S+) (%S+)$')
  if tok == ARGV[4] then return {tonumber(ok), tonumber(lvl)} end
end
local full = tonumber(ARGV[1])
local credit = tonumber(ARGV[2])
local function level(m)
  local v = redis.call('HGET', KEYS[1], m)
  if v then return math.min(full, tonumber(v)) end
  return full
end
local function store(m, v)
  if v >= full then redis.call('HDEL', KEYS[1], m) else redis.call('HSET', KEYS[1], m, v) end
end
for i = 5, #ARGV, 2 do
  local m = ARGV[i]
  if redis.call('HEXISTS', KEYS[1], m) == 1 then
    store(m, math.min(full, level(m) + tonumber(ARGV[i + 1]) * credit))
  end
end
if ARGV[3] == '' then
  redis.call('HSET', KEYS[2], '', ARGV[4] .. ' -1 0')
  return {-1, 0}
end
local t = level(ARGV[3])
local ok = 0
if t > full / 2 then
  t = t - 1000
  ok = 1
end
store(ARGV[3], t)
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4] .. ' ' .. ok .. ' ' .. t)
return {ok, t}
`)

// RedisOptions configure NewRedis.
type RedisOptions struct {
	KeyPrefix     string
	FlushInterval time.Duration // 0: DefaultFlushInterval
	Logger        *slog.Logger
}

// NewRedis returns the shared budget and starts its flusher (Close stops
// it). client must have bounded timeouts (redisconn.ClientOptions).
func NewRedis(client redis.Cmdable, b retry.Budget, o RedisOptions) *Redis {
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	r := &Redis{c: client, key: o.KeyPrefix + "{budget}:tokens", last: o.KeyPrefix + "{budget}:last",
		tokenPrefix: hex.EncodeToString(nonce[:]) + ":", b: b, log: o.Logger, local: NewMemory(b),
		pending: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go r.flusher(o.FlushInterval)
	return r
}

// keys are budgetScript's keys.
func (r *Redis) keys() []string { return []string{r.key, r.last} }

// token is a new call's token for budgetScript: a random prefix of this
// process's and a count.
func (r *Redis) token() string {
	return r.tokenPrefix + strconv.FormatUint(r.tokens.Add(1), 36)
}

// Budget returns the budget's parameters.
func (r *Redis) Budget() retry.Budget { return r.b }

// Retry decides a retry of model in one round trip, crediting the
// successes counted for it since the last one. Without Redis it decides on
// the local copy (and says so in its error; the decision is still valid).
func (r *Redis) Retry(ctx context.Context, model string) (Decision, error) {
	r.mu.Lock()
	n := r.pending[model]
	delete(r.pending, model)
	r.mu.Unlock()
	args := []any{r.b.Full(), r.b.Credit(), model, r.token()}
	if n > 0 {
		args = append(args, model, n)
	}
	res, err := budgetScript.Run(ctx, r.c, r.keys(), args...).Int64Slice()
	if err != nil || len(res) != 2 {
		if n > 0 {
			r.addPending(model, n)
		}
		d, _ := r.local.Retry(ctx, model)
		return d, fmt.Errorf("retry budget: %s: %v (decided locally)", model, err)
	}
	r.local.set(model, res[1])
	return Decision{Allowed: res[0] == 1, Tokens: retry.Tokens(res[1])}, nil
}

// Succeeded counts a successful call of model, for the next round trip.
func (r *Redis) Succeeded(model string) {
	r.local.Succeeded(model)
	r.addPending(model, 1)
}

func (r *Redis) addPending(model string, n int64) {
	r.mu.Lock()
	r.pending[model] += n
	r.mu.Unlock()
}

// Flush sends the successes counted so far, in one round trip (none when
// there are none).
func (r *Redis) Flush(ctx context.Context) error {
	r.mu.Lock()
	if len(r.pending) == 0 {
		r.mu.Unlock()
		return nil
	}
	batch := r.pending
	r.pending = map[string]int64{}
	r.mu.Unlock()
	args := make([]any, 0, 4+2*len(batch))
	args = append(args, r.b.Full(), r.b.Credit(), "", r.token())
	for m, n := range batch {
		args = append(args, m, n)
	}
	if err := budgetScript.Run(ctx, r.c, r.keys(), args...).Err(); err != nil {
		for m, n := range batch {
			r.addPending(m, n)
		}
		return fmt.Errorf("retry budget: flush: %w", err)
	}
	return nil
}

// Levels returns the tokens of every model whose shared budget is not
// full (the local copy's when Redis is unreachable).
func (r *Redis) Levels(ctx context.Context) (map[string]float64, error) {
	vals, err := r.c.HGetAll(ctx, r.key).Result()
	if err != nil {
		return r.local.Levels(ctx)
	}
	out := make(map[string]float64, len(vals))
	for m, v := range vals {
		if l, err := strconv.ParseInt(v, 10, 64); err == nil && l < r.b.Full() {
			out[m] = retry.Tokens(l)
		}
	}
	return out, nil
}

func (r *Redis) flusher(every time.Duration) {
	defer close(r.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			if err := r.Flush(ctx); err != nil {
				r.log.Warn("retry budget: successes not sent", "err", err)
			}
			cancel()
		}
	}
}

// Close stops the flusher and sends what it holds, once.
func (r *Redis) Close(ctx context.Context) error {
	var err error
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		err = r.Flush(ctx)
	})
	return err
}
