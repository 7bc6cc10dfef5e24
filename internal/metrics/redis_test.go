package metrics

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/cooldown"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retrybudget"
	"github.com/agentd/agentd/internal/sessionstore"
)

const testPrefix = "t:"

// testOwners are the stores' own key layouts under prefix, as app wires them.
func testOwners(prefix string) KeyOwners {
	return KeyOwners{
		Credentials: func(k string) bool { return credstore.OwnsKey(prefix, k) },
		Cooldowns:   func(k string) bool { return cooldown.OwnsKey(prefix, k) },
		Sessions:    func(k string) bool { return sessionstore.OwnsKey(prefix, k) },
		Budget:      func(k string) bool { return retrybudget.OwnsKey(prefix, k) },
	}
}

// testMetrics are metrics on a registry of the test's own.
type testMetrics struct {
	*Metrics
	reg *prometheus.Registry
}

func newRedisMetrics(t *testing.T) testMetrics {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	return testMetrics{New(reg, Options{Backends: []string{"redis"}}), reg}
}

// counts are the hook's series of one component: round trips, failures,
// and durations observed.
type counts struct{ trips, errs, observed float64 }

// redisCounts gathers the registry: every component's series must be there.
func redisCounts(t *testing.T, m testMetrics) map[string]counts {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]counts{}
	seen := map[string]int{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			var comp string
			for _, l := range s.GetLabel() {
				if l.GetName() == "component" {
					comp = l.GetValue()
				}
			}
			c := out[comp]
			switch mf.GetName() {
			case "agentd_redis_round_trips_total":
				c.trips = s.GetCounter().GetValue()
			case "agentd_redis_errors_total":
				c.errs = s.GetCounter().GetValue()
			case "agentd_redis_round_trip_seconds":
				c.observed = float64(s.GetHistogram().GetSampleCount())
			default:
				continue
			}
			out[comp] = c
			seen[comp]++
		}
	}
	for _, c := range RedisComponents {
		if seen[c] != 3 {
			t.Fatalf("component %s: %d of the 3 series gathered", c, seen[c])
		}
	}
	if len(seen) != len(RedisComponents) {
		t.Fatalf("components gathered: %v, want %v", seen, RedisComponents)
	}
	return out
}

// step runs do and checks the difference it made to the hook's series:
// want is the round trips and failures by component; every round trip is
// timed once.
func step(t *testing.T, m testMetrics, what string, want map[string]counts, do func()) {
	t.Helper()
	before := redisCounts(t, m)
	do()
	after := redisCounts(t, m)
	for _, c := range RedisComponents {
		got := counts{after[c].trips - before[c].trips, after[c].errs - before[c].errs, after[c].observed - before[c].observed}
		w := want[c]
		w.observed = w.trips
		if got != w {
			t.Errorf("%s: component %s: got %+v round trips/errors/timed, want %+v", what, c, got, w)
		}
	}
}

func TestRedisHookCountsRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	m := newRedisMetrics(t)
	for _, c := range RedisComponents {
		if got := redisCounts(t, m)[c]; got != (counts{}) {
			t.Fatalf("component %s starts at %+v, want 0", c, got)
		}
	}
	// One connection per pool (go-redis keeps one for commands, one for
	// pipelines), so that their handshakes (HELLO, CLIENT SETINFO, …: round
	// trips of their own, "other") happen before counting.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(m.RedisHook(testOwners(testPrefix)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, run := range []func(context.Context, func(redis.Pipeliner) error) ([]redis.Cmder, error){c.Pipelined, c.TxPipelined} {
		if _, err := run(ctx, func(p redis.Pipeliner) error { p.Ping(ctx); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// The handshakes' CLIENT commands fail before Redis 7.2: no failures.
	if got := redisCounts(t, m)[Other]; got.trips < 4 || got.errs != 0 {
		t.Errorf("connecting: %+v, want HELLO and the PINGs at least, no failure", got)
	}

	step(t, m, "PING", map[string]counts{Other: {trips: 1}}, func() {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
	step(t, m, "SET on a sessions key", map[string]counts{ComponentSessions: {trips: 1}}, func() {
		if err := c.Set(ctx, testPrefix+"{ses_abc}:meta", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	})
	step(t, m, "GET of a missing key (redis.Nil is no failure)", map[string]counts{ComponentSessions: {trips: 1}}, func() {
		if err := c.Get(ctx, testPrefix+"{ses_missing}:meta").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET = %v, want redis.Nil", err)
		}
	})
	step(t, m, "ZADD on the cooldowns", map[string]counts{ComponentCooldowns: {trips: 1}}, func() {
		if err := c.ZAdd(ctx, testPrefix+"{cooldowns}:models", redis.Z{Score: 1, Member: "p/m"}).Err(); err != nil {
			t.Fatal(err)
		}
	})
	step(t, m, "SMEMBERS of the providers", map[string]counts{ComponentCredentials: {trips: 1}}, func() {
		if err := c.SMembers(ctx, testPrefix+"providers").Err(); err != nil {
			t.Fatal(err)
		}
	})
	step(t, m, "a pipeline of 5 commands", map[string]counts{ComponentSessions: {trips: 1}}, func() {
		pipe := c.Pipeline()
		pipe.RPush(ctx, testPrefix+"{ses_abc}:history", "a")
		pipe.RPush(ctx, testPrefix+"{ses_abc}:history", "b")
		pipe.Expire(ctx, testPrefix+"{ses_abc}:history", time.Hour)
		pipe.ZAdd(ctx, testPrefix+"sessions:order", redis.Z{Score: 1, Member: "ses_abc"})
		pipe.SAdd(ctx, testPrefix+"tenant:0123:sessions", "ses_abc")
		cmds, err := pipe.Exec(ctx)
		if err != nil || len(cmds) != 5 {
			t.Fatalf("pipeline = %d commands, %v", len(cmds), err)
		}
	})
	step(t, m, "a transaction (MULTI … EXEC)", map[string]counts{ComponentCredentials: {trips: 1}}, func() {
		if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, testPrefix+"{prov:x}:meta", "v", 1)
			p.HIncrBy(ctx, testPrefix+"{prov:x}:meta", "v", 1)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	script := redis.NewScript(`return redis.call('HGET', KEYS[1], 'v')`)
	step(t, m, "SCRIPT LOAD", map[string]counts{Other: {trips: 1}}, func() {
		if err := script.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	})
	step(t, m, "EVALSHA on {prov:x}:meta", map[string]counts{ComponentCredentials: {trips: 1}}, func() {
		if v, err := script.EvalSha(ctx, c, []string{testPrefix + "{prov:x}:meta"}).Int(); err != nil || v != 2 {
			t.Fatalf("EVALSHA = %d, %v; want 2", v, err)
		}
	})
	step(t, m, "a script without keys", map[string]counts{Other: {trips: 1}}, func() {
		if err := c.Eval(ctx, `return 1`, nil).Err(); err != nil {
			t.Fatal(err)
		}
	})
	step(t, m, "PUBLISH on a control channel", map[string]counts{ComponentSessions: {trips: 1}}, func() {
		if err := c.Publish(ctx, testPrefix+"replica:r1:control", "x").Err(); err != nil {
			t.Fatal(err)
		}
	})
	// A script not in Redis' cache: go-redis sends it again, no failure.
	fresh := redis.NewScript(`return redis.call('HGET', KEYS[1], 'v') .. 'x'`)
	step(t, m, "Script.Run of a script not loaded (EVALSHA: NOSCRIPT, then EVAL)", map[string]counts{ComponentCredentials: {trips: 2}}, func() {
		if v, err := fresh.Run(ctx, c, []string{testPrefix + "{prov:x}:meta"}).Text(); err != nil || v != "2x" {
			t.Fatalf("Run = %q, %v; want 2x", v, err)
		}
	})
	step(t, m, "a script that fails", map[string]counts{ComponentCredentials: {trips: 1, errs: 1}}, func() {
		if err := c.Eval(ctx, `return redis.call('INCR', KEYS[1])`, []string{testPrefix + "{prov:x}:meta"}).Err(); err == nil {
			t.Fatal("INCR of a hash succeeded")
		}
	})
	step(t, m, "INCR of a non-integer", map[string]counts{ComponentSessions: {trips: 1, errs: 1}}, func() {
		if err := c.Incr(ctx, testPrefix+"{ses_abc}:meta").Err(); err == nil {
			t.Fatal("INCR of a string succeeded")
		}
	})
	step(t, m, "a pipeline whose first command fails", map[string]counts{ComponentSessions: {trips: 1, errs: 1}}, func() {
		pipe := c.Pipeline()
		pipe.Incr(ctx, testPrefix+"{ses_abc}:meta")
		pipe.Get(ctx, testPrefix+"{ses_abc}:meta")
		if _, err := pipe.Exec(ctx); err == nil {
			t.Fatal("pipeline succeeded")
		}
	})
}

// TestRedisHookCountsUnreachable: a round trip that never reached Redis
// counts, and fails.
func TestRedisHookCountsUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := newRedisMetrics(t)
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(m.RedisHook(testOwners(testPrefix)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	step(t, m, "GET with Redis down", map[string]counts{ComponentCooldowns: {trips: 1, errs: 1}}, func() {
		if err := c.Get(ctx, testPrefix+"{cooldowns}:models").Err(); err == nil || errors.Is(err, redis.Nil) {
			t.Fatalf("GET = %v, want a connection error", err)
		}
	})
	step(t, m, "a pipeline with Redis down", map[string]counts{ComponentCredentials: {trips: 1, errs: 1}}, func() {
		pipe := c.Pipeline()
		pipe.Get(ctx, testPrefix+"{prov:x}:order")
		pipe.Get(ctx, testPrefix+"{prov:x}:creds")
		if _, err := pipe.Exec(ctx); err == nil {
			t.Fatal("pipeline succeeded")
		}
	})
}

func TestRedisComponentOfKeys(t *testing.T) {
	for _, prefix := range []string{"", "bench1:"} {
		h := newRedisHook(testOwners(prefix))
		for key, want := range map[string]int{
			prefix + "{prov:anthropic}:creds":        compCredentials,
			prefix + "{prov:anthropic}:order":        compCredentials,
			prefix + "{prov:anthropic}:blocks":       compCredentials,
			prefix + "{prov:anthropic}:meta":         compCredentials,
			prefix + "{prov:anthropic}:changed":      compCredentials,
			prefix + "providers":                     compCredentials,
			prefix + "{cooldowns}:models":            compCooldowns,
			prefix + "{budget}:tokens":               compBudget,
			prefix + "{ses_abc}:meta":                compSessions,
			prefix + "{ses_abc}:history":             compSessions,
			prefix + "{ses_abc}:stripped":            compSessions,
			prefix + "{ses_abc}:appended":            compSessions,
			prefix + "{ses_abc}:events":              compSessions,
			prefix + "{ses_abc}:lease":               compSessions,
			prefix + "{ses_abc}:run":                 compSessions,
			prefix + "{ses_abc}:notify":              compSessions,
			prefix + "tenant:0123abcd:sessions":      compSessions,
			prefix + "sessions:order":                compSessions,
			prefix + "sessions:running":              compSessions,
			prefix + "replica:r1:control":            compSessions,
			prefix + "something-else":                compOther,
			"elsewhere:{cooldowns}:models-" + prefix: compOther,
		} {
			if got := h.classify(key); got != want {
				t.Errorf("prefix %q: classify(%q) = %s, want %s", prefix, key, RedisComponents[got], RedisComponents[want])
			}
		}
	}
	h := newRedisHook(testOwners(testPrefix))
	for _, tc := range []struct {
		args []any
		want int
	}{
		{[]any{"ping"}, compOther},
		{[]any{"evalsha", "abc", 1, testPrefix + "{prov:x}:meta", "arg"}, compCredentials},
		{[]any{"EVAL", "return 1", "1", testPrefix + "{cooldowns}:models"}, compCooldowns},
		{[]any{"evalsha", "abc", 0, testPrefix + "{prov:x}:meta"}, compOther}, // an ARGV, not a key
		{[]any{"fcall_ro", "f", int64(1), testPrefix + "{ses_x}:meta"}, compSessions},
		{[]any{"script", "load", "return 1"}, compOther},
		{[]any{"get", []byte(testPrefix + "{ses_x}:meta")}, compOther},
	} {
		if got := h.component(tc.args); got != tc.want {
			t.Errorf("component(%v) = %s, want %s", tc.args, RedisComponents[got], RedisComponents[tc.want])
		}
	}
}

// The hook adds no allocation to a round trip.
func TestRedisHookAllocations(t *testing.T) {
	m := newRedisMetrics(t)
	h := m.RedisHook(testOwners(testPrefix))
	ctx := context.Background()
	one := h.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	pipe := h.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
	cmd := redis.NewCmd(ctx, "evalsha", "abc", 1, testPrefix+"{prov:x}:meta")
	cmds := []redis.Cmder{redis.NewStatusCmd(ctx, "multi"), redis.NewCmd(ctx, "get", testPrefix+"{ses_x}:meta"), redis.NewStatusCmd(ctx, "exec")}
	if n := testing.AllocsPerRun(100, func() { _ = one(ctx, cmd); _ = pipe(ctx, cmds) }); n != 0 {
		t.Errorf("%v allocations per round trip, want 0", n)
	}
	got := redisCounts(t, m)
	for _, c := range []string{ComponentCredentials, ComponentSessions} {
		// AllocsPerRun runs once more to warm up.
		if got[c] != (counts{trips: 101, observed: 101}) {
			t.Errorf("component %s: %+v, want 101 round trips", c, got[c])
		}
	}
}
