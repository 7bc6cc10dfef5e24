package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

type retryParams struct {
	Happy, Retried, Rotations, Fallbacks int // prompts per phase
	Retries                              int // failed attempts per retried prompt
	Conc                                 int
}

func retryParamsFor(quick bool) retryParams {
	if quick {
		return retryParams{Happy: 20, Retried: 10, Rotations: 5, Fallbacks: 5, Retries: 3, Conc: 2}
	}
	return retryParams{Happy: 300, Retried: 150, Rotations: 100, Fallbacks: 100, Retries: 3, Conc: 4}
}

// runRetry: end-to-end fault scripts through agentd and the mock, on the
// memory store and on the Redis store (a redis-server of the bench's own):
//
//   - happy: prompts without faults;
//   - retried: "[[faults: 503,503,503,ok]]" with base_delay_ms 1, so the
//     difference to happy, per failed attempt, is agentd's cost of a retried
//     attempt (the failed call, its classification, the backoff, the
//     events);
//   - rotation: "[[faults: usage,ok]]" on a provider with many credentials:
//     a usage limit, a credential switch, the retry on the sibling;
//   - fallback: "[[faults: 529,ok]]" on sessions whose role falls back to a
//     second provider: a cooldown, a model switch, the retry there.
//
// On Redis, the round trips per prompt come from agentd's own
// agentd_redis_round_trips_total, by component (credentials, cooldowns,
// sessions, other), scraped around each phase: a command, a script run or a
// whole pipeline is one round trip. Besides, the commands clients sent
// (MONITOR: every pipelined command counts) and the commands Redis ran
// (INFO commandstats: those Lua scripts ran included). All three less the
// background (the credential store's sync, the sessions' upkeep) measured
// while agentd is idle.
func runRetry(ctx context.Context, e *Env, round int) (Metrics, error) {
	p := retryParamsFor(e.Cfg.Quick)
	m := Metrics{}
	var redis *Redis
	if r, err := StartRedis(e.Dir); err != nil {
		e.Note("retry", "Redis runs skipped: %v", err)
	} else {
		redis = r
		defer redis.Stop(5 * time.Second)
	}
	stores := []string{"memory"}
	if redis != nil {
		stores = append(stores, "redis")
	}
	creds := make([]string, 2*p.Rotations+8)
	for i := range creds {
		creds[i] = fmt.Sprintf("k%03d", i)
	}
	headers := map[string]string{"X-Mock-Tokens": "8"}
	for _, store := range stores {
		cfg := "retry: {base_delay_ms: 1}\n"
		if store == "redis" {
			// The credential store's sync (a few round trips a second) once a
			// minute: it is no prompt's, and would only blur the per-prompt
			// round trips through the background's subtraction.
			cfg += fmt.Sprintf("store: {backend: redis, redis: {addr: %q, key_prefix: \"bench%d:\", sync_interval_ms: 60000}}\n", redis.Addr, round)
		}
		cfg += "providers:\n" + e.MockProvider("mock", "anthropic", headers, creds...) +
			e.MockProvider("backup", "anthropic", headers)
		a, err := e.StartAgentd("retry-"+store, cfg)
		if err != nil {
			return m, err
		}
		err = retryStore(ctx, e, a, redis, store, round, p, m)
		a.Stop(15 * time.Second)
		if err != nil {
			return m, fmt.Errorf("%s: %w", store, err)
		}
	}
	return m, nil
}

func retryStore(ctx context.Context, e *Env, a *Agentd, redis *Redis, store string, round int, p retryParams, m Metrics) error {
	c, err := NewClient(a, 2)
	if err != nil {
		return err
	}
	defer c.Close()
	useRedis := store == "redis"
	if !useRedis {
		redis = nil
	}
	// The background: Redis commands, commands sent and round trips per
	// second while agentd idles (the credential store's sync).
	var bgRate, bgSentRate float64
	var mon *Monitor
	var rt *roundTrips
	if redis != nil {
		var err error
		if mon, err = redis.Monitor(); err != nil {
			return err
		}
		defer mon.Close()
		if rt, err = newRoundTrips(ctx, a); err != nil {
			e.Note("retry", "%s: no Redis round trips from agentd's /metrics: %v", store, err)
			rt = nil
		}
		// Scrape first: the scrape's own commands stay out of MONITOR's
		// and INFO's counts.
		var rt0 map[string]float64
		if rt != nil {
			if rt0, err = rt.read(ctx); err != nil {
				return err
			}
		}
		c0, err := redis.CommandStats()
		if err != nil {
			return err
		}
		top0, _ := mon.Counts()
		t0 := time.Now()
		idle := 3 * time.Second
		if e.Cfg.Quick {
			idle = 500 * time.Millisecond
		}
		time.Sleep(idle)
		c1, err := redis.CommandStats()
		if err != nil {
			return err
		}
		top1, _ := mon.Counts()
		el := time.Since(t0)
		if rt != nil {
			rt1, err := rt.read(ctx)
			if err != nil {
				return err
			}
			rt.setBackground(rt0, rt1, el)
			for _, c := range rtComponents {
				m[store+".rt_background_"+c+"_per_s"] = rt.bg[c]
				m[store+".rt_scrape_"+c] = rt.cost[c]
			}
		}
		n, _ := redisCalls(c0, c1)
		bgRate = float64(n) / el.Seconds()
		bgSentRate = float64(sum(top1)-sum(top0)) / el.Seconds()
		m[store+".redis_background_cmds_per_s"] = bgRate
		m[store+".redis_background_sent_per_s"] = bgSentRate
	}
	fallback := &agentdv1.CreateSessionRequest{Model: "mock/claude-bench", Retry: &agentdv1.RetrySettings{
		FallbackChains: map[string]*agentdv1.ModelChain{"default": {Models: []string{"backup/claude-backup"}}},
	}}
	plain := &agentdv1.CreateSessionRequest{Model: "mock/claude-bench"}
	phases := []struct {
		name     string
		n        int
		req      *agentdv1.CreateSessionRequest
		faults   string
		attempts int // failed attempts per prompt
	}{
		{"happy", p.Happy, plain, "", 0},
		{"retried", p.Retried, plain, strings.TrimSuffix(strings.Repeat("503,", p.Retries), ","), p.Retries},
		{"rotation", p.Rotations, plain, "usage", 1},
		{"fallback", p.Fallbacks, fallback, "529", 1},
	}
	if !useRedis {
		phases = phases[:2]
	}
	per := map[string]float64{}
	for _, ph := range phases {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ids, err := c.CreateSessions(ctx, ph.n, 8, ph.req)
		if err != nil {
			return fmt.Errorf("%s: create sessions: %w", ph.name, err)
		}
		var cmd0, top0 map[string]int64
		var rt0 map[string]float64
		if redis != nil {
			if rt != nil { // first: see above
				if rt0, err = rt.read(ctx); err != nil {
					return err
				}
			}
			if cmd0, err = redis.CommandStats(); err != nil {
				return err
			}
			top0, _ = mon.Counts()
		}
		cpu0 := a.Sample()
		t0 := time.Now()
		var mu sync.Mutex
		types := map[string]int{}
		events := 0
		bad := 0
		err = parallel(ctx, ph.n, p.Conc, func(i int) error {
			text := fmt.Sprintf("retry %s %s round %d prompt %d", store, ph.name, round, i)
			if ph.faults != "" {
				text += " [[faults: " + ph.faults + ",ok]]"
			}
			t := &Turn{Types: map[string]int{}}
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err := c.PromptGRPC(pctx, ids[i], text, t)
			cancel()
			mu.Lock()
			defer mu.Unlock()
			if err != nil || t.Outcome != "completed" {
				bad++
				if bad <= 2 {
					e.Note("retry", "round %d %s %s: prompt %d: %v %s", round, store, ph.name, i, err, t.Outcome)
				}
				return nil
			}
			events += t.Events
			for k, v := range t.Types {
				types[k] += v
			}
			return nil
		})
		cpu1 := a.Sample()
		dur := time.Since(t0)
		if err != nil {
			return fmt.Errorf("%s: %w", ph.name, err)
		}
		k := store + "." + ph.name
		n := float64(ph.n)
		m[k+".failed_prompts"] = float64(bad)
		m[k+".cpu_us_per_prompt"] = float64((cpu1.CPU - cpu0.CPU).Microseconds()) / n
		m[k+".events_per_prompt"] = float64(events) / n
		per[ph.name+".cpu"] = m[k+".cpu_us_per_prompt"]
		per[ph.name+".events"] = m[k+".events_per_prompt"]
		for _, t := range []string{"auto_retry_start", "credential_switched", "retry_fallback_applied", "model_change"} {
			m[k+"."+t+"_per_prompt"] = float64(types[t]) / n
		}
		if redis != nil {
			cmd1, err := redis.CommandStats()
			if err != nil {
				return err
			}
			top1, _ := mon.Counts()
			if rt != nil {
				rt1, err := rt.read(ctx)
				if err != nil {
					return err
				}
				total := 0.0
				for c, v := range rt.net(rt0, rt1, dur) {
					m[k+".rt_"+c+"_per_prompt"] = v / n
					per[ph.name+".rt_"+c] = v / n
					total += v / n
				}
				m[k+".rt_total_per_prompt"] = total
				per[ph.name+".rt_total"] = total
			}
			total, _ := redisCalls(cmd0, cmd1)
			net := float64(total) - bgRate*dur.Seconds()
			m[k+".redis_cmds_per_prompt"] = max(net, 0) / n
			per[ph.name+".redis"] = m[k+".redis_cmds_per_prompt"]
			sent, by := redisCalls(top0, top1)
			m[k+".redis_sent_per_prompt"] = max(float64(sent)-bgSentRate*dur.Seconds(), 0) / n
			per[ph.name+".sent"] = m[k+".redis_sent_per_prompt"]
			var parts []string
			for name, v := range by {
				parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(v)/n))
			}
			sort.Strings(parts)
			if round == 1 {
				e.Note("retry", "%s %s, round 1: Redis commands sent per prompt (MONITOR, background included): %s", store, ph.name, strings.Join(parts, ", "))
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		_ = c.DeleteSessions(dctx, ids, 8)
		cancel()
		e.Prog.Update("%s %s: %d prompts in %s", store, ph.name, ph.n, dur.Round(time.Millisecond))
	}
	// Per retried attempt: the difference to a happy prompt.
	for _, ph := range phases[1:] {
		if ph.attempts == 0 {
			continue
		}
		k := store + "." + ph.name
		m[k+".cpu_us_per_attempt"] = (per[ph.name+".cpu"] - per["happy.cpu"]) / float64(ph.attempts)
		m[k+".events_per_attempt"] = (per[ph.name+".events"] - per["happy.events"]) / float64(ph.attempts)
		if useRedis {
			m[k+".redis_cmds_per_attempt"] = (per[ph.name+".redis"] - per["happy.redis"]) / float64(ph.attempts)
			m[k+".redis_sent_per_attempt"] = (per[ph.name+".sent"] - per["happy.sent"]) / float64(ph.attempts)
			if rt != nil {
				for _, c := range append(slices.Clone(rtComponents), "total") {
					m[k+".rt_"+c+"_per_attempt"] = (per[ph.name+".rt_"+c] - per["happy.rt_"+c]) / float64(ph.attempts)
				}
			}
		}
	}
	return nil
}

// rtComponents are the components agentd counts its Redis round trips by
// (the values of agentd_redis_round_trips_total's component label,
// metrics.RedisComponents).
var rtComponents = []string{"credentials", "cooldowns", "sessions", "budget", "other"}

// roundTrips reads agentd's Redis round trips by component from its
// /metrics. A scrape costs round trips of its own — the handler refreshes
// the store gauges first (the credentials' list, the cooldowns) — and
// serves them in its own values: the difference of two scrapes holds one
// scrape's cost, which is subtracted.
type roundTrips struct {
	a    *Agentd
	cost map[string]float64 // one scrape's round trips
	bg   map[string]float64 // round trips per second while agentd idles
}

// newRoundTrips measures a scrape's cost: the least difference between
// consecutive scrapes (the background seldom falls between two).
func newRoundTrips(ctx context.Context, a *Agentd) (*roundTrips, error) {
	r := &roundTrips{a: a, cost: map[string]float64{}, bg: map[string]float64{}}
	prev, err := r.read(ctx)
	if err != nil {
		return nil, err
	}
	for i := range 4 {
		cur, err := r.read(ctx)
		if err != nil {
			return nil, err
		}
		for _, c := range rtComponents {
			if d := cur[c] - prev[c]; i == 0 || d < r.cost[c] {
				r.cost[c] = d
			}
		}
		prev = cur
	}
	return r, nil
}

func (r *roundTrips) read(ctx context.Context) (map[string]float64, error) {
	return r.a.Counters(ctx, "agentd_redis_round_trips_total", "component")
}

// setBackground sets the idle rate from two scrapes el apart.
func (r *roundTrips) setBackground(before, after map[string]float64, el time.Duration) {
	for c, v := range r.net(before, after, 0) {
		r.bg[c] = v / el.Seconds()
	}
}

// net is the round trips by component between two scrapes dur apart, less
// the later scrape's own and the background.
func (r *roundTrips) net(before, after map[string]float64, dur time.Duration) map[string]float64 {
	out := make(map[string]float64, len(rtComponents))
	for _, c := range rtComponents {
		out[c] = max(after[c]-before[c]-r.cost[c]-r.bg[c]*dur.Seconds(), 0)
	}
	return out
}

// benchLineRE is one result line of `go test -bench -benchmem`.
var benchLineRE = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op)?(?:\s+([\d.]+) allocs/op)?`)

// runGoBench runs the Go benchmarks of internal/retry once.
func runGoBench(ctx context.Context, cfg Config, round int) (map[string]Metrics, error) {
	benchtime := "300ms"
	if cfg.Quick {
		benchtime = "20ms"
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", benchtime, "-count", "1", "./internal/retry")
	cmd.Dir = cfg.RepoDir
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(cfg.Out, fmt.Sprintf("go-bench-round%d.txt", round)), out, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, lastLines(out, 5))
	}
	res := map[string]Metrics{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		mm := benchLineRE.FindStringSubmatch(sc.Text())
		if mm == nil {
			continue
		}
		x := Metrics{}
		x["ns_op"], _ = strconv.ParseFloat(mm[2], 64)
		if mm[3] != "" {
			x["b_op"], _ = strconv.ParseFloat(mm[3], 64)
		}
		if mm[4] != "" {
			x["allocs_op"], _ = strconv.ParseFloat(mm[4], 64)
		}
		res[mm[1]] = x
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("no benchmark lines in the output: %s", lastLines(out, 5))
	}
	return res, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// profileTops summarises each collected profile with `go tool pprof -top`.
func profileTops(ctx context.Context, e *Env) map[string]string {
	out := map[string]string{}
	for _, path := range e.profiles {
		args := []string{"tool", "pprof", "-top", "-nodecount=25"}
		name := strings.TrimSuffix(filepath.Base(path), ".pprof")
		if strings.HasSuffix(name, "-cpu") {
			args = append(args, "-cum")
		}
		if strings.HasSuffix(name, "-heap") {
			args = append(args, "-sample_index=inuse_space")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, e.Cfg.Bin, path)...)
		cmd.Dir = e.Cfg.RepoDir
		b, err := cmd.Output()
		if err != nil {
			continue
		}
		txt := filepath.Join(filepath.Dir(path), name+".top.txt")
		_ = os.WriteFile(txt, b, 0o644)
		out[name] = txt
	}
	return out
}
