// Package bench is agentd's load tool (`agentd bench`): it starts agentd, a
// mock provider (package mock, the engine the tests use) and, for the Redis
// runs, a redis-server of its own, all on loopback; it drives agentd over
// gRPC and over REST/SSE, open-loop and closed-loop; and it measures
// agentd against a bare httputil.ReverseProxy floor in the same run.
//
// Scenarios (see BENCHMARKS.md): overhead, capacity, idle-memory, fanout,
// retry. Each runs Config.Rounds times, the rounds interleaved (round 1 of
// every scenario, then round 2, …), each round on a fresh agentd; results
// are the median over the rounds and their spread (min–max). The
// store-dependent scenarios (StoreScenarios) run once per store of
// Config.Stores in each round, one store after the other; the Redis runs
// share one redis-server of the bench's own, each with a key prefix of its
// own, and report their metrics under the memory runs' names prefixed with
// "redis.". agentd's CPU
// time and RSS come from /proc/<pid>; heap figures and pprof profiles from
// a debug listener that `agentd serve` opens only when the bench asks
// (AGENTD_BENCH_DEBUG_ADDR, see ServeDebug).
//
// Every load loop is bounded in count and in time and stops by itself; all
// traffic stays on 127.0.0.0/8.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
)

// Scenario names, in their run order.
var Scenarios = []string{"overhead", "capacity", "idle-memory", "fanout", "retry"}

// Session stores agentd runs on (config store.backend).
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

// StoreScenarios are the scenarios that run once per store of
// Config.Stores (retry runs on both stores by itself).
var StoreScenarios = []string{"overhead", "capacity", "idle-memory", "fanout"}

// storeKey is metric k of a run on store: unchanged on the memory store,
// "redis."+k on the Redis store.
func storeKey(store, k string) string {
	if store == StoreRedis {
		return "redis." + k
	}
	return k
}

// runTag names a scenario run in notes and errors: "round 2", or "round 2
// redis" on the Redis store.
func runTag(round int, store string) string {
	if store == StoreRedis {
		return fmt.Sprintf("round %d redis", round)
	}
	return fmt.Sprintf("round %d", round)
}

// Config configures a run.
type Config struct {
	Bin       string   // the agentd binary
	Out       string   // output directory (results.json, results.md, profiles/)
	Rounds    int      // runs of each scenario (default 3)
	Scenarios []string // default: all
	// Quick shrinks every scenario to a smoke test (seconds).
	Quick bool
	// Profile collects pprof CPU and heap profiles of agentd in a last pass.
	Profile bool
	// MemBudget bounds agentd's RSS (bytes): idle-memory stops adding
	// sessions or subscribers above it (default 8 GiB).
	MemBudget int64
	// RepoDir, when set, is the module root: the retry scenario runs the Go
	// benchmarks of internal/retry there with `go test -bench`.
	RepoDir string
	// Progress gets the progress line (nil: none).
	Progress io.Writer
	// Version describes the agentd under test (e.g. git describe).
	Version string
	// Stores are the session stores the StoreScenarios run agentd on, each
	// once per round, in this order (default: memory only). The Redis runs
	// share one redis-server that the bench starts.
	Stores []string
	// Baseline, when set, is an earlier agentd binary: the overhead
	// scenario runs it beside Bin, the two's prompts interleaved in a
	// random order, and reports Bin's added TTFT and CPU per prompt as
	// ratios to the baseline's (a paired comparison: both see the same
	// moments of a shared machine).
	Baseline string
	// BaselineVersion labels the baseline in the report.
	BaselineVersion string
}

// Env is what the scenarios share in a run.
type Env struct {
	Cfg  Config
	Dir  string // scratch directory
	Mock *MockProc
	Prog *Progress
	// Redis is the redis-server of the Redis-store runs of the
	// StoreScenarios (nil without them); retry starts its own.
	Redis *Redis

	mu       sync.Mutex
	notes    map[string][]string
	goBench  map[string][]Metrics // the Go benchmarks' rounds, by benchmark
	profiles []string
}

// Note records a remark for a scenario's report (once per text).
func (e *Env) Note(scenario, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := fmt.Sprintf(format, args...)
	if !slices.Contains(e.notes[scenario], s) {
		e.notes[scenario] = append(e.notes[scenario], s)
	}
}

// StartAgentd starts a fresh agentd with cfg for one scenario run.
func (e *Env) StartAgentd(name string, cfg string, env ...string) (*Agentd, error) {
	return e.startAgentdBin(e.Cfg.Bin, name, cfg, env)
}

// startAgentdBin is StartAgentd with the binary bin.
func (e *Env) startAgentdBin(bin, name, cfg string, env []string) (*Agentd, error) {
	dir, err := os.MkdirTemp(e.Dir, name+"-")
	if err != nil {
		return nil, err
	}
	return StartAgentd(bin, dir, cfg, env)
}

// StartAgentdOn starts a fresh agentd with cfg for one run of a
// store-dependent scenario on store: on the Redis store with e.Redis and a
// key prefix of the run's own ("bench-<scenario>-<round>:").
func (e *Env) StartAgentdOn(store, scenario string, round int, cfg string) (*Agentd, error) {
	return e.startAgentdOn(e.Cfg.Bin, store, scenario, round, cfg)
}

// startAgentdOn is StartAgentdOn with the binary bin; scenario names the
// run's key prefix on the Redis store.
func (e *Env) startAgentdOn(bin, store, scenario string, round int, cfg string) (*Agentd, error) {
	switch store {
	case StoreMemory:
		return e.startAgentdBin(bin, scenario, cfg, nil)
	case StoreRedis:
		if e.Redis == nil {
			return nil, errors.New("no redis-server for the Redis store")
		}
		cfg = fmt.Sprintf("store: {backend: redis, redis: {addr: %q, key_prefix: \"bench-%s-%d:\"}}\n", e.Redis.Addr, scenario, round) + cfg
		return e.startAgentdBin(bin, scenario+"-redis", cfg, nil)
	}
	return nil, fmt.Errorf("unknown store %q", store)
}

// redisOf is the redis-server a run on store uses: e.Redis on the Redis
// store, nil on the memory store.
func (e *Env) redisOf(store string) *Redis {
	if store == StoreRedis {
		return e.Redis
	}
	return nil
}

// profileName is a profile's name for a run on store: name, or "redis-"+name.
func profileName(store, name string) string {
	if store == StoreRedis {
		return "redis-" + name
	}
	return name
}

// MockProvider is the providers: entry of an anthropic provider named name
// on the mock, with X-Mock-* headers.
func (e *Env) MockProvider(name, kind string, headers map[string]string, creds ...string) string {
	base := e.Mock.URL
	if kind != "anthropic" {
		base += "/v1"
	}
	if len(creds) == 0 {
		creds = []string{name + "-key"}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    kind: %s\n    base_url: %s\n    credentials:\n", name, kind, base)
	for _, c := range creds {
		fmt.Fprintf(&b, "      - {id: %s, api_key: mock-%s}\n", c, c)
	}
	if len(headers) > 0 {
		b.WriteString("    headers:\n")
		keys := make([]string, 0, len(headers))
		for k := range headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "      %s: %q\n", k, headers[k])
		}
	}
	return b.String()
}

// profiling reports whether this round collects profiles (the last one,
// when Config.Profile): CPU profiling costs agentd a few percent.
func (e *Env) profiling(round int) bool { return e.Cfg.Profile && round == e.Cfg.Rounds }

// CPUProfile starts fetching a CPU profile of agentd over d into
// profiles/name.pprof; wait returns when it is written.
func (e *Env) CPUProfile(ctx context.Context, a *Agentd, name string, d time.Duration) (wait func()) {
	path := filepath.Join(e.Cfg.Out, "profiles", name+".pprof")
	done := make(chan struct{})
	go func() {
		defer close(done)
		sec := max(int(d.Round(time.Second)/time.Second), 1)
		if err := a.Profile(ctx, "profile", sec, path); err != nil {
			e.Note("profiles", "%s: %v", name, err)
			return
		}
		e.addProfile(path)
	}()
	return func() { <-done }
}

// AllocsProfile writes agentd's allocations since it started (pprof's
// allocs profile) to profiles/name.pprof.
func (e *Env) AllocsProfile(ctx context.Context, a *Agentd, name string) {
	path := filepath.Join(e.Cfg.Out, "profiles", name+".pprof")
	if err := a.Profile(ctx, "allocs", 0, path); err != nil {
		e.Note("profiles", "%s: %v", name, err)
		return
	}
	e.addProfile(path)
}

// HeapProfile writes agentd's heap (after a GC) and goroutine profiles to
// profiles/name-heap.pprof and name-goroutine.pprof.
func (e *Env) HeapProfile(ctx context.Context, a *Agentd, name string) {
	for _, kind := range []string{"heap", "goroutine"} {
		path := filepath.Join(e.Cfg.Out, "profiles", name+"-"+kind+".pprof")
		k := kind
		if kind == "heap" {
			k = "heap?gc=1"
		}
		if err := a.Profile(ctx, k, 0, path); err != nil {
			e.Note("profiles", "%s %s: %v", name, kind, err)
			continue
		}
		e.addProfile(path)
	}
}

func (e *Env) addProfile(path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.profiles = append(e.profiles, path)
}

// Result is a whole run's output.
type Result struct {
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Machine  Machine   `json:"machine"`
	Version  string    `json:"agentd_version"`
	Rounds   int       `json:"rounds"`
	Quick    bool      `json:"quick"`
	Stores   []string  `json:"stores,omitempty"` // of the StoreScenarios, when not memory alone
	// Baseline is the earlier agentd binary the overhead scenario ran
	// beside the one under test (Config.Baseline), with its label.
	Baseline  string                     `json:"baseline,omitempty"`
	Scenarios map[string]*ScenarioResult `json:"scenarios"`
	Targets   []Target                   `json:"targets"`
	GoBench   map[string]map[string]Agg  `json:"go_bench,omitempty"`
	Profiles  []string                   `json:"profiles,omitempty"`
	// ProfileTops are `go tool pprof -top` summaries of the profiles.
	ProfileTops map[string]string            `json:"profile_tops,omitempty"`
	Extra       map[string]map[string]string `json:"extra,omitempty"`
}

// ScenarioResult is one scenario's rounds and their aggregate.
type ScenarioResult struct {
	Rounds    []Metrics      `json:"rounds"`
	Aggregate map[string]Agg `json:"aggregate"`
	Errors    []string       `json:"errors,omitempty"`
	Notes     []string       `json:"notes,omitempty"`
	Seconds   []float64      `json:"seconds"`
}

// runners run one scenario once: round, on store (StoreMemory for the
// scenarios that are not StoreScenarios).
var runners = map[string]func(ctx context.Context, e *Env, round int, store string) (Metrics, error){
	"overhead":    runOverhead,
	"capacity":    runCapacity,
	"idle-memory": runIdleMemory,
	"fanout":      runFanout,
	"retry": func(ctx context.Context, e *Env, round int, _ string) (Metrics, error) {
		return runRetry(ctx, e, round)
	},
}

// storesOf validates stores: default memory, each at most once.
func storesOf(stores []string) ([]string, error) {
	if len(stores) == 0 {
		return []string{StoreMemory}, nil
	}
	var out []string
	for _, s := range stores {
		if s != StoreMemory && s != StoreRedis {
			return nil, fmt.Errorf("unknown store %q (memory or redis)", s)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Run runs the scenarios and writes results.json and results.md to
// cfg.Out. It returns the result even when some scenario runs failed (their
// errors are in it).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Rounds <= 0 {
		cfg.Rounds = 3
	}
	if len(cfg.Scenarios) == 0 {
		cfg.Scenarios = Scenarios
	}
	for _, s := range cfg.Scenarios {
		if runners[s] == nil {
			return nil, fmt.Errorf("unknown scenario %q (one of %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	if cfg.MemBudget <= 0 {
		cfg.MemBudget = 8 << 30
	}
	stores, err := storesOf(cfg.Stores)
	if err != nil {
		return nil, err
	}
	cfg.Stores = stores
	if cfg.Bin == "" {
		return nil, errors.New("no agentd binary")
	}
	if err := os.MkdirAll(filepath.Join(cfg.Out, "profiles"), 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "agentd-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The load generator allocates a lot of short-lived garbage: fewer GCs
	// keep its share of the two cores small.
	debug.SetGCPercent(400)

	e := &Env{Cfg: cfg, Dir: dir, Prog: NewProgress(cfg.Progress), notes: map[string][]string{}, goBench: map[string][]Metrics{}}
	e.Mock, err = StartMock(cfg.Bin)
	if err != nil {
		return nil, err
	}
	defer e.Mock.Stop(5 * time.Second)
	if slices.Contains(cfg.Stores, StoreRedis) && slices.ContainsFunc(cfg.Scenarios, isStoreScenario) {
		e.Redis, err = StartRedis(dir)
		if err != nil {
			return nil, fmt.Errorf("the Redis store: %w", err)
		}
		defer e.Redis.Stop(5 * time.Second)
	}

	res := &Result{Started: time.Now(), Machine: DescribeMachine(), Version: cfg.Version, Rounds: cfg.Rounds,
		Quick: cfg.Quick, Scenarios: map[string]*ScenarioResult{}}
	if !slices.Equal(cfg.Stores, []string{StoreMemory}) {
		res.Stores = cfg.Stores
	}
	if cfg.Baseline != "" {
		res.Baseline = cfg.Baseline
		if cfg.BaselineVersion != "" {
			res.Baseline += " (" + cfg.BaselineVersion + ")"
		}
	}
	for _, s := range cfg.Scenarios {
		res.Scenarios[s] = &ScenarioResult{}
	}
	for round := 1; round <= cfg.Rounds; round++ {
		for _, s := range cfg.Scenarios {
			if ctx.Err() != nil {
				break
			}
			stores := []string{StoreMemory}
			if isStoreScenario(s) {
				stores = cfg.Stores
			}
			// One round's metrics: every store's, the Redis runs' prefixed.
			m := Metrics{}
			sr := res.Scenarios[s]
			t0 := time.Now()
			for _, store := range stores {
				if ctx.Err() != nil {
					break
				}
				label, tag := s, runTag(round, store)
				if store == StoreRedis {
					label += " (redis)"
				}
				e.Prog.Stage("round %d/%d %s", round, cfg.Rounds, label)
				t1 := time.Now()
				sm, err := runners[s](ctx, e, round, store)
				if store == StoreRedis && e.Redis != nil {
					// The run's agentd has stopped: the next run starts on
					// an empty Redis (its key prefix is its own anyway).
					if _, ferr := e.Redis.Do("FLUSHALL"); ferr != nil && err == nil {
						err = fmt.Errorf("FLUSHALL after the run: %w", ferr)
					}
				}
				if err != nil {
					sr.Errors = append(sr.Errors, fmt.Sprintf("%s: %v", tag, err))
					e.Prog.Println("%s %s: %v", tag, s, err)
				}
				for k, v := range sm {
					m[storeKey(store, k)] = v
				}
				e.Prog.Println("round %d/%d %-11s done in %s", round, cfg.Rounds, label, time.Since(t1).Round(time.Second))
			}
			sr.Seconds = append(sr.Seconds, time.Since(t0).Seconds())
			sr.Rounds = append(sr.Rounds, m)
		}
		if slices.Contains(cfg.Scenarios, "retry") && cfg.RepoDir != "" && ctx.Err() == nil {
			e.Prog.Stage("round %d/%d go test -bench ./internal/retry", round, cfg.Rounds)
			gb, err := runGoBench(ctx, cfg, round)
			if err != nil {
				e.Note("retry", "go test -bench: %v", err)
			}
			for name, m := range gb {
				e.goBench[name] = append(e.goBench[name], m)
			}
		}
		finish(res, e)
		_ = write(res, cfg.Out)
	}
	res.Profiles = e.profiles
	if e.Cfg.RepoDir != "" {
		res.ProfileTops = profileTops(ctx, e)
	}
	res.Duration = time.Since(res.Started).Round(time.Second).String()
	finish(res, e)
	e.Prog.Println("")
	if err := write(res, cfg.Out); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

func isStoreScenario(s string) bool { return slices.Contains(StoreScenarios, s) }

// finish aggregates the rounds and evaluates the targets.
func finish(res *Result, e *Env) {
	for name, sr := range res.Scenarios {
		sr.Aggregate = Aggregate(sr.Rounds)
		sr.Notes = e.notes[name]
	}
	if len(e.goBench) > 0 {
		res.GoBench = map[string]map[string]Agg{}
		for name, rounds := range e.goBench {
			res.GoBench[name] = Aggregate(rounds)
		}
	}
	res.Targets = evaluateTargets(res)
}

// write writes results.json and results.md.
func write(res *Result, out string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "results.md"), []byte(Markdown(res)), 0o644)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// jnum is x for JSON: null when not finite.
func jnum(x float64) any {
	if finite(x) {
		return x
	}
	return nil
}

// MarshalJSON writes non-finite values as null.
func (m Metrics) MarshalJSON() ([]byte, error) {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = jnum(v)
	}
	return json.Marshal(out)
}

// MarshalJSON writes non-finite values as null.
func (a Agg) MarshalJSON() ([]byte, error) {
	rounds := make([]any, len(a.Rounds))
	for i, v := range a.Rounds {
		rounds[i] = jnum(v)
	}
	return json.Marshal(map[string]any{"median": jnum(a.Median), "min": jnum(a.Min), "max": jnum(a.Max), "rounds": rounds})
}
