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
// with the levels it last saw), and sends its successes again later —
// under the token of their first send, so that successes a lost reply
// hid are never credited twice.
type Redis struct {
	c        redis.Cmdable
	key      string
	once     string // <prefix>{budget}:once: (budgetScript)
	b        retry.Budget
	log      *slog.Logger
	local    *Memory
	now      func() time.Time
	resendIn time.Duration // how long a sent batch is sent again (< creditTTL)

	mu      sync.Mutex
	pending map[string]int64 // successes never sent, by model
	unacked []sentBatch      // successes sent without an answer

	flushMu sync.Mutex // one Flush at a time

	// The calls' tokens: a random prefix of this process's and a count.
	tokenPrefix string
	tokens      atomic.Uint64

	stop      chan struct{}
	done      chan struct{}
	onceClose sync.Once
}

// sentBatch is successes a call carried without hearing its answer: they
// may be in Redis already. They are sent again under the same token, which
// the script recognizes, until an answer comes.
type sentBatch struct {
	token   string
	credits map[string]int64
	first   time.Time // the first send
}

// How long Redis keeps a call's answer (budgetScript's once key): a call
// that credits nothing is only ever sent again by go-redis, at once; one
// that credits successes is sent again by the replica (sentBatch) for up
// to creditTTL less a minute.
const (
	answerTTL = time.Minute
	creditTTL = 10 * time.Minute
)

// budgetScript credits successes, then decides a retry.
//
//	KEYS[1]   <prefix>{budget}:tokens       HASH model → level (units); absent: full
//	KEYS[2]   <prefix>{budget}:once:<token> STRING the call's answer, "allowed level"
//	ARGV[1]   full level (units)
//	ARGV[2]   credit of one success (units)
//	ARGV[3]   model whose retry to decide, or "" for none
//	ARGV[4]   how long to keep the answer (ms)
//	ARGV[5..] model, successes, … to credit first
//
// A token is 1000 units (retry.BudgetScale). It returns {allowed (1, 0;
// -1 without a decision), level after}. The same token run again (go-redis
// sends a command again when its reply was lost; the replica sends
// successes again when it heard nothing) finds its answer and returns it,
// crediting and spending nothing. Each call has a key of its own: another
// replica's calls in between change nothing of that.
var budgetScript = redis.NewScript(`
local done = redis.call('GET', KEYS[2])
if done then
  local ok, lvl = string.match(done, '^(%S+) (%S+)$')
  return {tonumber(ok), tonumber(lvl)}
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
  redis.call('SET', KEYS[2], '-1 0', 'PX', ARGV[4])
  return {-1, 0}
end
local t = level(ARGV[3])
local ok = 0
if t > full / 2 then
  t = t - 1000
  ok = 1
end
store(ARGV[3], t)
redis.call('SET', KEYS[2], ok .. ' ' .. t, 'PX', ARGV[4])
return {ok, t}
`)

// RedisOptions configure NewRedis.
type RedisOptions struct {
	KeyPrefix     string
	FlushInterval time.Duration // 0: DefaultFlushInterval
	Logger        *slog.Logger
	// Now is the clock of a batch's age (nil: time.Now).
	Now func() time.Time
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
	if o.Now == nil {
		o.Now = time.Now
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	r := &Redis{c: client, key: o.KeyPrefix + "{budget}:tokens", once: o.KeyPrefix + "{budget}:once:",
		tokenPrefix: hex.EncodeToString(nonce[:]) + ":", b: b, log: o.Logger, local: NewMemory(b),
		now: o.Now, resendIn: creditTTL - time.Minute,
		pending: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go r.flusher(o.FlushInterval)
	return r
}

// keys are budgetScript's keys for the call with token.
func (r *Redis) keys(token string) []string { return []string{r.key, r.once + token} }

// token is a new call's token for budgetScript: a random prefix of this
// process's and a count.
func (r *Redis) token() string {
	return r.tokenPrefix + strconv.FormatUint(r.tokens.Add(1), 36)
}

// Budget returns the budget's parameters.
func (r *Redis) Budget() retry.Budget { return r.b }

// Retry decides a retry of model in one round trip, crediting the
// successes counted for it since the last one (none while successes sent
// before wait for an answer: those go first, with the next flush).
// Without Redis it decides on the local copy (and says so in its error;
// the decision is still valid).
func (r *Redis) Retry(ctx context.Context, model string) (Decision, error) {
	r.mu.Lock()
	var n int64
	if len(r.unacked) == 0 {
		n = r.pending[model]
		delete(r.pending, model)
	}
	r.mu.Unlock()
	tok := r.token()
	args := []any{r.b.Full(), r.b.Credit(), model, answerTTL.Milliseconds()}
	if n > 0 {
		args[3] = creditTTL.Milliseconds()
		args = append(args, model, n)
	}
	res, err := budgetScript.Run(ctx, r.c, r.keys(tok), args...).Int64Slice()
	if err != nil || len(res) != 2 {
		if n > 0 {
			r.keep(sentBatch{token: tok, credits: map[string]int64{model: n}, first: r.now()})
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
	r.mu.Lock()
	r.pending[model]++
	r.mu.Unlock()
}

// keep holds b for the next flush to send again.
func (r *Redis) keep(b ...sentBatch) {
	r.mu.Lock()
	r.unacked = append(r.unacked, b...)
	r.mu.Unlock()
}

// Flush sends the successes counted so far: first those sent before
// without an answer, each again under its token, then the rest in one
// round trip under a new one (nothing when there are none). Successes sent
// more than creditTTL less a minute ago and still unanswered are dropped
// (their call's answer may have expired in Redis: sending them again
// could credit them twice; dropped, the budget refills more slowly, never
// faster than it should).
func (r *Redis) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	batches := r.unacked
	r.unacked = nil
	if len(r.pending) > 0 {
		batches = append(batches, sentBatch{token: r.token(), credits: r.pending, first: r.now()})
		r.pending = map[string]int64{}
	}
	r.mu.Unlock()
	now := r.now()
	for i, b := range batches {
		if now.Sub(b.first) > r.resendIn {
			r.log.Warn("retry budget: successes sent without an answer for too long, dropped",
				"models", len(b.credits), "since", b.first)
			continue
		}
		args := make([]any, 0, 4+2*len(b.credits))
		args = append(args, r.b.Full(), r.b.Credit(), "", creditTTL.Milliseconds())
		for m, n := range b.credits {
			args = append(args, m, n)
		}
		if err := budgetScript.Run(ctx, r.c, r.keys(b.token), args...).Err(); err != nil {
			r.keep(batches[i:]...)
			return fmt.Errorf("retry budget: flush: %w", err)
		}
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
	r.onceClose.Do(func() {
		close(r.stop)
		<-r.done
		err = r.Flush(ctx)
	})
	return err
}
