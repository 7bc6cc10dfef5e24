package bench

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Target is one of the targets, evaluated on the medians.
type Target struct {
	Name  string `json:"name"`
	Goal  string `json:"goal"`
	Value string `json:"value"`
	Met   *bool  `json:"met"` // null: not measured
	Note  string `json:"note,omitempty"`
}

// agg returns a scenario's aggregate of metric k (NaN median when absent).
func (r *Result) agg(scenario, k string) Agg {
	if s := r.Scenarios[scenario]; s != nil {
		if a, ok := s.Aggregate[k]; ok {
			return a
		}
	}
	return Agg{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
}

func (r *Result) med(scenario, k string) float64 { return r.agg(scenario, k).Median }

// stores are the stores the StoreScenarios ran on (memory alone when
// Result.Stores is empty).
func (r *Result) stores() []storeView {
	names := r.Stores
	if len(names) == 0 {
		names = []string{StoreMemory}
	}
	out := make([]storeView, 0, len(names))
	for _, s := range names {
		v := storeView{r: r, store: s}
		if s == StoreRedis {
			v.prefix, v.label = "redis.", ", Redis store"
		}
		out = append(out, v)
	}
	return out
}

// storeView reads the metrics of one store's runs: the memory store's under
// their names, the Redis store's prefixed "redis.".
type storeView struct {
	r             *Result
	store         string
	prefix, label string // label: "" or ", Redis store", appended to row names
}

func (v storeView) agg(scenario, k string) Agg     { return v.r.agg(scenario, v.prefix+k) }
func (v storeView) med(scenario, k string) float64 { return v.r.med(scenario, v.prefix+k) }
func (v storeView) redis() bool                    { return v.store == StoreRedis }

// plusRedis is " (+ X redis-server)" for a metric of the Redis store's
// redis-server, "" when not measured.
func plusRedis(a Agg, format, unit string) string {
	if !finite(a.Median) {
		return ""
	}
	return " (+ " + f(a, format) + unit + " redis-server)"
}

func met(ok bool) *bool { return &ok }

// decisionCases are the BenchmarkDecision cases of ordinary provider errors
// (the 64 KiB message is reported apart).
func (r *Result) decisionWorst() (ns, allocs float64, worstNs, worstAllocs string) {
	ns, allocs = math.NaN(), math.NaN()
	for name, m := range r.GoBench {
		if !strings.HasPrefix(name, "BenchmarkDecision/") || strings.Contains(name, "long-message") {
			continue
		}
		if v := m["ns_op"].Median; finite(v) && (math.IsNaN(ns) || v > ns) {
			ns, worstNs = v, strings.TrimPrefix(name, "BenchmarkDecision/")
		}
		if v := m["allocs_op"].Median; finite(v) && (math.IsNaN(allocs) || v > allocs) {
			allocs, worstAllocs = v, strings.TrimPrefix(name, "BenchmarkDecision/")
		}
	}
	return
}

// evaluateTargets checks the targets against the medians.
func evaluateTargets(r *Result) []Target {
	var ts []Target
	add := func(name, goal string, value float64, ok func(float64) bool, format string, note string) {
		t := Target{Name: name, Goal: goal, Note: note}
		if finite(value) {
			t.Value = fmt.Sprintf(format, value)
			t.Met = met(ok(value))
		} else {
			t.Value = "not measured"
		}
		ts = append(ts, t)
	}
	le := func(lim float64) func(float64) bool { return func(v float64) bool { return v <= lim } }
	ge := func(lim float64) func(float64) bool { return func(v float64) bool { return v >= lim } }

	// The targets of the StoreScenarios: one row per store, side by side
	// (the Redis store's named ", Redis store").
	each := func(f func(v storeView)) {
		for _, v := range r.stores() {
			f(v)
		}
	}
	// Overhead.
	for _, p := range []struct{ path, label string }{{pathREST, "REST+SSE"}, {pathGRPC, "gRPC"}} {
		each(func(v storeView) {
			add("added TTFT p50, "+p.label+v.label, "≤ 0.5 ms", v.med("overhead", "added_ttft."+p.path+".p50"), le(0.5), "%.3f ms", "")
		})
		each(func(v storeView) {
			add("added TTFT p99, "+p.label+v.label, "≤ 2 ms", v.med("overhead", "added_ttft."+p.path+".p99"), le(2), "%.3f ms", "")
		})
		each(func(v storeView) {
			note := fmt.Sprintf("floor (bare ReverseProxy) adds %.3f ms", v.med("overhead", "added_ttft.floor.p50"))
			if gf := v.med("overhead", "added_ttft.grpc_floor.p50"); p.path == pathGRPC && finite(gf) {
				note += fmt.Sprintf("; the gRPC floor (a bare grpc-go relay) adds %.3f ms, %.2f× the floor's, and agentd %.2f× the gRPC floor's",
					gf, v.med("overhead", "ratio_to_floor.grpc_floor.p50"), v.med("overhead", "ratio_to_grpc_floor.grpc.p50"))
			}
			add("added TTFT p50 / floor's, "+p.label+v.label, "≤ 1.5×", v.med("overhead", "ratio_to_floor."+p.path+".p50"), le(1.5), "%.2f×", note)
		})
	}
	// CPU per chunk, capacity.
	each(func(v storeView) {
		add("agentd CPU per relayed chunk per subscriber (fanout, 100 subscribers)"+v.label, "≤ 40 µs",
			v.med("fanout", "n100.cpu_us_per_chunk_per_sub"), le(40), "%.1f µs", redisNote(v, v.med("fanout", "n100.redis_server_cpu_us_per_chunk_per_sub"), "%.1f µs"))
	})
	each(func(v storeView) {
		capChunk, capRate := math.NaN(), ""
		if rate, _ := cleanRate(v.agg("capacity", "max_rate.le_10ms")); finite(rate) {
			capChunk = v.med("capacity", fmt.Sprintf("rate.%g.cpu_us_per_chunk", rate))
			capRate = fmt.Sprintf("at %g prompts/s, one subscriber per stream, the prompt's own work included", rate)
			if x := v.med("capacity", fmt.Sprintf("rate.%g.redis_server_cpu_us_per_chunk", rate)); finite(x) {
				capRate += fmt.Sprintf(", redis-server %.1f µs more", x)
			}
		}
		if fl := v.med("capacity", "floor.cpu_us_per_chunk"); finite(fl) {
			capRate += fmt.Sprintf("; the bare proxy: %.1f µs per chunk at %g prompts/s", fl, v.med("capacity", "floor.rate"))
		}
		add("agentd CPU per relayed chunk (capacity)"+v.label, "≤ 40 µs", capChunk, le(40), "%.1f µs", strings.TrimPrefix(capRate, "; "))
	})
	// CPU per prompt on each transport at the floor's rate, against the
	// floor's per request.
	for _, op := range []struct {
		path, label string
		goal        float64
	}{{pathREST, "REST+SSE", 1.5}, {pathGRPC, "gRPC", 1.3}} {
		each(func(v storeView) {
			add("CPU per prompt / floor's per request, "+op.label+v.label, fmt.Sprintf("≤ %g×", op.goal),
				v.med("capacity", "cpu_ratio_to_floor."+op.path), le(op.goal), "%.2f×", cpuRatioNote(v, op.path))
		})
	}
	each(func(v storeView) {
		note := "no clean rate"
		if r, _ := cleanRate(v.agg("capacity", "max_rate.le_10ms")); finite(r) {
			note = fmt.Sprintf("highest clean rate %g prompts/s", r)
		}
		if hi := v.med("capacity", "floor_high.rate"); finite(hi) {
			note += fmt.Sprintf("; the bare proxy alone at %g prompts/s (%.0f streams): added p99 %.2f ms", hi,
				v.med("capacity", "floor_high.inflight.mean"), v.med("capacity", "floor_high.added.p99"))
		}
		add("concurrent streaming sessions with added p99 ≤ 10 ms"+v.label, "≥ 1000", v.med("capacity", "concurrency_max.le_10ms"), ge(1000), "%.0f", note)
	})
	// Memory.
	each(func(v storeView) {
		note := fmt.Sprintf("RSS %.1f KiB per session; history of two messages adds %.2f KiB of heap",
			v.med("idle-memory", "bare.10000.rss_per_session_b")/1024, v.med("idle-memory", "10000.history_per_session_b")/1024)
		if x := v.med("idle-memory", "bare.10000.redis_server_mem_per_session_b"); finite(x) {
			note += fmt.Sprintf("; redis-server holds %.2f KiB per bare session, %.2f KiB with its history",
				x/1024, v.med("idle-memory", "10000.redis_server_mem_per_session_b")/1024)
		}
		add("idle session (without its history), heap"+v.label, "≤ 16 KiB", v.med("idle-memory", "bare.10000.heap_per_session_b")/1024, le(16), "%.1f KiB", note)
	})
	each(func(v storeView) {
		add("idle SSE subscriber, heap + stacks"+v.label, "≤ 32 KiB", v.med("idle-memory", "subscriber.heap_b")/1024, le(32), "%.1f KiB",
			fmt.Sprintf("RSS %.1f KiB, %.1f goroutines per subscriber", v.med("idle-memory", "subscriber.rss_b")/1024, v.med("idle-memory", "subscriber.goroutines")))
	})
	each(func(v storeView) {
		live100k, rss100k := v.med("idle-memory", "100000.total_live_mib"), v.med("idle-memory", "100000.total_rss_mib")
		note := fmt.Sprintf("Go heap %.2f GiB, RSS %.2f GiB (RSS keeps what the 10k subscribers used)", live100k/1024, rss100k/1024)
		if x := v.med("idle-memory", "100000.redis_server_used_mib"); finite(x) {
			note += fmt.Sprintf("; redis-server holds %.2f GiB more", x/1024)
		}
		add("100k idle sessions fit in 2 GiB (the larger of Go heap and RSS)"+v.label, "≤ 2 GiB", math.Max(live100k, rss100k)/1024, le(2), "%.2f GiB", note)
	})
	each(func(v storeView) {
		add("RSS 10 s after the capacity load / idle RSS (every session deleted)"+v.label, "≤ 2×",
			v.med("capacity", "rss.after_load_ratio"), le(2), "%.2f×", afterLoadNote(v))
	})
	// Fan-out.
	each(func(v storeView) {
		stall := v.med("fanout", "stall_effect.p99_ms")
		nostall := v.med("fanout", "n100.nostall.last.p99")
		if !finite(nostall) {
			stall = math.NaN()
		}
		add("a stalled subscriber adds nothing (last-subscriber p99 at 100, with − without)"+v.label, "≤ noise (0.5 ms + 10%)", stall,
			func(x float64) bool { return x <= 0.5+0.1*nostall }, "%+.3f ms",
			fmt.Sprintf("without the stalled subscriber: %.3f ms; backlog toward the stalled one %.0f KiB", nostall, v.med("fanout", "n100.stalled_backlog_end_kib")))
	})
	each(func(v storeView) {
		add("last-subscriber p99 at 100 subscribers"+v.label, "≤ 5 ms", v.med("fanout", "n100.last.p99"), le(5), "%.3f ms", "")
	})
	// Retry.
	ns, allocs, worstNs, worstAllocs := r.decisionWorst()
	add("retry decision time (Classify + Plan), worst ordinary error", "≤ 10 µs", ns/1000, le(10), "%.1f µs", worstNs)
	add("retry decision allocations, worst ordinary error", "≤ 30", allocs, le(30), "%.0f", worstAllocs)
	// The Redis targets are the credential store's: sessions kept in Redis
	// need round trips by design, reported beside.
	rt := func(phase, c, per string) string {
		return orDash(fmtFinite(r.med("retry", "redis."+phase+".rt_"+c+"_per_"+per), "%.2f"))
	}
	add("Redis round trips per prompt, happy path", "0", r.med("retry", "redis.happy.rt_credentials_per_prompt"), le(0.05), "%.2f",
		"the credential store's, from agentd_redis_round_trips_total, background subtracted; besides, sessions "+rt("happy", "sessions", "prompt")+
			" (by design), cooldowns "+rt("happy", "cooldowns", "prompt")+", other "+rt("happy", "other", "prompt")+" per prompt")
	// Both with the happy path's allowance of 0.05 for what the background's
	// subtraction leaves (round trips are whole, their averages not).
	add("Redis round trips per credential rotation", "≤ 1", r.med("retry", "redis.rotation.rt_credentials_per_attempt"), le(1.05), "%.2f",
		"the credential store's: the rotation prompt's less a happy prompt's; besides, sessions "+rt("rotation", "sessions", "attempt")+
			" more than a happy prompt's ("+rt("rotation", "sessions", "prompt")+" per rotation prompt)")
	return ts
}

// afterLoadNote is the note of the RSS-after-load target: agentd's levels,
// and the floor's own after its heaviest load.
func afterLoadNote(v storeView) string {
	c := func(k string) float64 { return v.med("capacity", k) }
	if !finite(c("rss.after_load_mib")) {
		return ""
	}
	note := fmt.Sprintf("agentd idle %.1f MiB, %.1f MiB %.0f s after its last step (live heap %.1f MiB, from %.1f idle, "+
		"the clients' connections closed; %.0f goroutines; peak RSS %.0f MiB); against the idle RSS plus the live heap's growth %.2f×",
		c("rss.idle_mib"), c("rss.after_load_mib"), c("rss.after_load_s"), c("rss.after_load_live_mib"), c("rss.idle_live_mib"),
		c("rss.after_load_goroutines"), c("rss.peak_mib"), c("rss.after_load_live_ratio"))
	if finite(c("floor_high.rss.after_load_ratio")) {
		note += fmt.Sprintf("; the bare proxy after %g prompts/s: idle %.1f MiB, %.1f MiB after (%.2f×; peak %.0f MiB)",
			c("floor_high.rate"), c("floor_high.rss.idle_mib"), c("floor_high.rss.after_load_mib"),
			c("floor_high.rss.after_load_ratio"), c("floor_high.rss.peak_mib"))
	}
	return note
}

// cpuRatioNote is the note of a CPU-per-prompt target: both sides of the
// ratio, the per-chunk ratio, redis-server's share, the step's errors.
func cpuRatioNote(v storeView, path string) string {
	perPrompt, floor := v.med("capacity", "cpu_us_per_prompt."+path), v.med("capacity", "cpu_us_per_request.floor")
	if !finite(perPrompt) || !finite(floor) {
		return ""
	}
	note := fmt.Sprintf("agentd %.0f µs per prompt, the bare proxy %.0f µs per request, at %g prompts/s, all over %s; per chunk %.2f×",
		perPrompt, floor, v.med("capacity", "floor.rate"), map[string]string{pathREST: "REST+SSE", pathGRPC: "gRPC"}[path],
		v.med("capacity", "cpu_per_chunk_ratio_to_floor."+path))
	if gf := v.med("capacity", "grpc_floor.cpu_us_per_request"); path == pathGRPC && finite(gf) {
		note += fmt.Sprintf("; the gRPC floor (a bare grpc-go relay) %.0f µs per request, %.2f× the bare proxy's, and agentd %.2f× the gRPC floor's",
			gf, v.med("capacity", "grpc_floor.cpu_ratio_to_floor"), v.med("capacity", "cpu_ratio_to_grpc_floor.grpc"))
	}
	if x := redisNote(v, v.med("capacity", "only."+path+".redis_server_cpu_us_per_prompt"), "%.0f µs per prompt"); x != "" {
		note += "; " + x
	}
	if bad := Aggregate(roundsOf(v.onePathBad(path)))["v"].Median; finite(bad) && bad > 0 {
		note += fmt.Sprintf("; %.0f errors or drops", bad)
	}
	return note
}

// fmtFinite formats v, or is "" when v is not a number.
func fmtFinite(v float64, format string) string {
	if !finite(v) {
		return ""
	}
	return fmt.Sprintf(format, v)
}

// redisNote is a target's note on the Redis store: redis-server's share,
// when measured.
func redisNote(v storeView, x float64, format string) string {
	if !v.redis() || !finite(x) {
		return ""
	}
	return fmt.Sprintf("redis-server "+format+" more", x)
}

// f formats an aggregate: the median and, over several rounds, [min–max].
func f(a Agg, format string) string {
	if !finite(a.Median) {
		return "–"
	}
	s := fmt.Sprintf(format, a.Median)
	n := 0
	for _, v := range a.Rounds {
		if finite(v) {
			n++
		}
	}
	if n > 1 && a.Max != a.Min {
		s += fmt.Sprintf(" <sub>["+format+"–"+format+"]</sub>", a.Min, a.Max)
	}
	return s
}

// Markdown renders the result as tables.
func Markdown(r *Result) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := r.Machine
	w("# agentd bench results\n\n")
	w("Machine: %s, %d cores, %s RAM, Linux %s, %s, open files %s. agentd %s. %s, %d rounds",
		m.CPUModel, m.Cores, m.MemTotal, m.Kernel, m.GoVersion, m.NoFile, orDash(r.Version), r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Rounds)
	if r.Duration != "" {
		w(", %s", r.Duration)
	}
	if r.Quick {
		w(" (quick: smoke-test sizes, not comparable)")
	}
	w(".\nEach value is the median over the rounds, with [min–max] when they differ.\n\n")
	if len(r.Stores) > 0 {
		var names []string
		for _, v := range r.stores() {
			names = append(names, map[string]string{StoreMemory: "the memory store", StoreRedis: "the Redis store"}[v.store])
		}
		w("The overhead, capacity, idle-memory and fanout scenarios ran agentd on %s, a fresh agentd per run, the stores one "+
			"after the other in each round. The Redis store is a redis-server of the bench's own on loopback (one for the whole run, "+
			"a key prefix per agentd, emptied after each); rows and targets marked *Redis store* are those runs, and "+
			"*redis-server* figures are its own CPU and memory.\n\n", strings.Join(names, " and "))
	}

	if len(r.Targets) > 0 {
		w("## Targets\n\n| target | goal | measured | met |\n|---|---|---|---|\n")
		for _, t := range r.Targets {
			mark := "not measured"
			if t.Met != nil {
				mark = map[bool]string{true: "**met**", false: "**not met**"}[*t.Met]
			}
			v := t.Value
			if t.Note != "" {
				v += " (" + t.Note + ")"
			}
			w("| %s | %s | %s | %s |\n", t.Name, t.Goal, v, mark)
		}
		w("\n")
	}
	if _, ok := r.Scenarios["overhead"]; ok {
		mdOverhead(&b, r)
	}
	if _, ok := r.Scenarios["capacity"]; ok {
		mdCapacity(&b, r)
	}
	if _, ok := r.Scenarios["idle-memory"]; ok {
		mdIdle(&b, r)
	}
	if _, ok := r.Scenarios["fanout"]; ok {
		mdFanout(&b, r)
	}
	if _, ok := r.Scenarios["retry"]; ok {
		mdRetry(&b, r)
	}
	names := make([]string, 0, len(r.Scenarios))
	for n := range r.Scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	var notes []string
	for _, n := range names {
		s := r.Scenarios[n]
		for _, e := range s.Errors {
			notes = append(notes, fmt.Sprintf("- %s: error: %s", n, e))
		}
		for _, x := range s.Notes {
			notes = append(notes, fmt.Sprintf("- %s: %s", n, x))
		}
	}
	if len(notes) > 0 {
		w("## Notes\n\n%s\n\n", strings.Join(notes, "\n"))
	}
	if len(r.ProfileTops) > 0 {
		w("## Profiles\n\npprof profiles of agentd (last round) and their `go tool pprof -top` summaries:\n\n")
		keys := make([]string, 0, len(r.ProfileTops))
		for k := range r.ProfileTops {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			w("- `%s`\n", r.ProfileTops[k])
		}
		w("\n")
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func mdOverhead(b *strings.Builder, r *Result) {
	stores := r.stores()
	// The direct path and the floor: the first store's runs.
	base := stores[0]
	a := func(k string) Agg { return base.agg("overhead", k) }
	fmt.Fprintf(b, "## overhead — one request at a time\n\n")
	fmt.Fprintf(b, "An 8-delta Anthropic stream, 2 ms between frames, %s requests per path per round, the paths interleaved. "+
		"*Added* pXX is the path's pXX less the direct path's median (conservative: the direct path's own outliers never "+
		"lower it). Added TTFT counts the request's way in (sent → the mock has it) plus the first delta's way out (the mock "+
		"wrote it → the client read it), so the mock's own pacing is not in it; per chunk is each delta's way out; gap is "+
		"the time between two deltas at the client (the mock paces them 2 ms apart).\n\n", f(a("ttft.direct.n"), "%.0f"))
	fmt.Fprintf(b, "| path | TTFT p50 | TTFT p99 | added TTFT p50 | added TTFT p99 | added per chunk p50 / p99 | gap p99 | added end of turn p50 / p99 |\n|---|---|---|---|---|---|---|---|\n")
	labels := map[string]string{pathDirect: "direct to the mock", pathFloor: "bare ReverseProxy (floor)",
		pathGRPCFloor: "bare grpc-go relay (gRPC floor)", pathREST: "agentd REST+SSE", pathGRPC: "agentd gRPC",
		pathRESTBase: "baseline agentd REST+SSE", pathGRPCBase: "baseline agentd gRPC"}
	paths := overheadPaths
	withBaseline := r.Baseline != ""
	if withBaseline {
		paths = append(slices.Clone(paths), pathRESTBase, pathGRPCBase)
	}
	for _, p := range paths {
		if p == pathDirect {
			fmt.Fprintf(b, "| %s | %s ms | %s ms | – | – | – | %s ms | – |\n", labels[p], f(a("ttft."+p+".p50"), "%.3f"), f(a("ttft."+p+".p99"), "%.3f"),
				f(a("gap."+p+".p99"), "%.3f"))
			continue
		}
		views := stores
		floor := p == pathFloor || p == pathGRPCFloor
		if floor {
			views = stores[:1]
		}
		for _, v := range views {
			a := func(k string) Agg { return v.agg("overhead", k) }
			label := labels[p]
			if !floor {
				label += v.label
			}
			fmt.Fprintf(b, "| %s | %s ms | %s ms | %s ms | %s ms | %s / %s ms | %s ms | %s / %s ms |\n", label,
				f(a("ttft."+p+".p50"), "%.3f"), f(a("ttft."+p+".p99"), "%.3f"),
				f(a("added_ttft."+p+".p50"), "%.3f"), f(a("added_ttft."+p+".p99"), "%.3f"),
				f(a("added_chunk."+p+".p50"), "%.3f"), f(a("added_chunk."+p+".p99"), "%.3f"),
				f(a("gap."+p+".p99"), "%.3f"),
				f(a("added_end."+p+".p50"), "%.3f"), f(a("added_end."+p+".p99"), "%.3f"))
		}
	}
	if finite(a("added_ttft.grpc_floor.p50").Median) {
		fmt.Fprintf(b, "\nThe gRPC floor is a bare grpc-go server (a process of its own) whose Prompt posts the text to the mock and "+
			"sends each text delta as an Event, then a PromptEnd: no session, store, retry, metrics or auth, one json.Unmarshal "+
			"per data line. It adds %s ms TTFT p50, **%s× the HTTP floor's**: what gRPC itself costs here. agentd's gRPC path "+
			"adds %s× the gRPC floor's.\n", f(a("added_ttft.grpc_floor.p50"), "%.3f"), f(a("ratio_to_floor.grpc_floor.p50"), "%.2f"),
			f(a("ratio_to_grpc_floor.grpc.p50"), "%.2f"))
	}
	for i, v := range stores {
		a := func(k string) Agg { return v.agg("overhead", k) }
		if withBaseline {
			fmt.Fprintf(b, "\n**Against the baseline** (`%s`%s, run beside agentd, the paths in a random order): added TTFT p50 "+
				"%s× over REST+SSE, %s× over gRPC; added per chunk p50 %s× / %s×; CPU per prompt %s× (agentd %s µs, the baseline %s µs).\n",
				r.Baseline, v.label, f(a("ratio_to_baseline.rest.p50"), "%.3f"), f(a("ratio_to_baseline.grpc.p50"), "%.3f"),
				f(a("ratio_to_baseline.chunk.rest.p50"), "%.3f"), f(a("ratio_to_baseline.chunk.grpc.p50"), "%.3f"),
				f(a("ratio_to_baseline.cpu_per_prompt"), "%.3f"), f(a("cpu_us_per_prompt"), "%.0f"), f(a("baseline.cpu_us_per_prompt"), "%.0f"))
		}
		if !v.redis() {
			fmt.Fprintf(b, "\nagentd CPU per prompt at one request at a time: %s µs (%s µs per delta). Machine busy during the run: %s%%.\n\n",
				f(a("cpu_us_per_prompt"), "%.0f"), f(a("cpu_us_per_chunk_c1"), "%.0f"), f(a("machine_busy_pct"), "%.0f"))
			continue
		}
		if i == 0 {
			fmt.Fprintf(b, "\n")
		} else {
			// The Redis rows come from runs of their own: their direct
			// path and floor.
			fmt.Fprintf(b, "The Redis store's rows are from runs of their own, their added values against those runs' direct path "+
				"(TTFT p50 %s ms); the floor there added %s / %s ms TTFT p50 / p99.\n\n",
				f(a("ttft.direct.p50"), "%.3f"), f(a("added_ttft.floor.p50"), "%.3f"), f(a("added_ttft.floor.p99"), "%.3f"))
		}
		fmt.Fprintf(b, "On the Redis store: agentd CPU per prompt at one request at a time %s µs (%s µs per delta), redis-server %s µs "+
			"per prompt more (RSS %s MiB). Machine busy during the run: %s%%.\n\n",
			f(a("cpu_us_per_prompt"), "%.0f"), f(a("cpu_us_per_chunk_c1"), "%.0f"), f(a("redis_server_cpu_us_per_prompt"), "%.0f"),
			f(a("redis_server_rss_mib"), "%.0f"), f(a("machine_busy_pct"), "%.0f"))
	}
}

func mdCapacity(b *strings.Builder, r *Result) {
	stores := r.stores()
	a := func(k string) Agg { return stores[0].agg("capacity", k) }
	fmt.Fprintf(b, "## capacity — open-loop sweep\n\n")
	fmt.Fprintf(b, "Prompts at a fixed rate on idle sessions of a pool, half over REST+SSE and half over gRPC; each stream %s text deltas, "+
		"%s ms between frames. Latency counts from each prompt's scheduled time. *Added* p99 is the larger of the TTFT's "+
		"(way in + first delta's way out) and the per-chunk transit's (mock write → client read). CPU per chunk is agentd's CPU "+
		"time over the text deltas delivered, the prompts' own work included. CPU columns are %% of one core (the machine has "+
		"two); *other load* is what the machine ran besides agentd, the mock and the load generator (other tenants).\n\n", f(a("tokens"), "%.0f"), f(a("chunk_ms"), "%.0f"))
	fmt.Fprintf(b, "| prompts/s | concurrent streams | chunks/s | added p99 | TTFT added p99 SSE / gRPC | chunk p99 SSE / gRPC | errors + drops | agentd CPU | CPU µs / chunk | provider conns / prompt | bench + mock CPU | other load |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	// The rates each store's sweep reached.
	rounds := r.Scenarios["capacity"].Rounds
	rates := map[float64]bool{}
	for _, s := range rounds {
		for k := range s {
			for _, v := range stores {
				if rest, ok := strings.CutPrefix(k, v.prefix+"rate."); ok {
					if x, ok := strings.CutSuffix(rest, ".prompts"); ok {
						if rate, err := strconv.ParseFloat(x, 64); err == nil {
							rates[rate] = true
						}
					}
				}
			}
		}
	}
	var rs []float64
	for x := range rates {
		rs = append(rs, x)
	}
	slices.Sort(rs)
	for _, x := range rs {
		for _, v := range stores {
			a := func(k string) Agg { return v.agg("capacity", k) }
			p := fmt.Sprintf("rate.%g.", x)
			var vals []float64
			for _, rr := range rounds {
				if _, ok := rr[v.prefix+p+"prompts"]; ok {
					vals = append(vals, rr[v.prefix+p+"errors"]+rr[v.prefix+p+"dropped"]+rr[v.prefix+p+"no_session"])
				}
			}
			if len(vals) == 0 {
				continue
			}
			bad := Aggregate(roundsOf(vals))["v"]
			fmt.Fprintf(b, "| %g%s | %s | %s | %s ms | %s / %s ms | %s / %s ms | %s | %s%%%s | %s%s | %s | %s%% | %s%% |\n", x, v.label,
				f(a(p+"inflight.mean"), "%.0f"), f(a(p+"chunks_per_s"), "%.0f"), f(a(p+"added.p99"), "%.2f"),
				f(a(p+"ttft_added.sse.p99"), "%.2f"), f(a(p+"ttft_added.grpc.p99"), "%.2f"),
				f(a(p+"chunk.sse.p99"), "%.2f"), f(a(p+"chunk.grpc.p99"), "%.2f"),
				f(bad, "%.0f"), f(a(p+"agentd_cpu_pct"), "%.0f"), plusRedis(a(p+"redis_server_cpu_pct"), "%.0f", "%"),
				f(a(p+"cpu_us_per_chunk"), "%.1f"), plusRedis(a(p+"redis_server_cpu_us_per_chunk"), "%.1f", ""),
				f(a(p+"provider_conns_per_prompt"), "%.2f"), f(a(p+"tool_cpu_pct"), "%.0f"), f(a(p+"other_cpu_pct"), "%.0f"))
		}
	}
	for _, v := range stores {
		a := func(k string) Agg { return v.agg("capacity", k) }
		if !finite(a("floor.cpu_us_per_chunk").Median) {
			mdOnePath(b, v)
			continue
		}
		atFloor := fmt.Sprintf("rate.%g.", a("floor.rate").Median)
		if !v.redis() {
			fmt.Fprintf(b, "\nThe floor: the same streams at %s prompts/s through the bare ReverseProxy (a process of its own) straight to the mock: "+
				"added p99 %s ms (TTFT %s, chunk %s), proxy CPU %s%% of a core, **%s µs per chunk**; agentd at the same rate: %s µs per chunk, %s× the floor's.\n",
				f(a("floor.rate"), "%.0f"), f(a("floor.added.p99"), "%.2f"), f(a("floor.ttft_added.p99"), "%.2f"), f(a("floor.chunk.p99"), "%.2f"),
				f(a("floor.cpu_pct"), "%.0f"), f(a("floor.cpu_us_per_chunk"), "%.1f"),
				f(a(atFloor+"cpu_us_per_chunk"), "%.1f"), f(a("cpu_per_chunk_ratio_to_floor"), "%.1f"))
			if hi := a("floor_high.rate"); finite(hi.Median) {
				fmt.Fprintf(b, "The bare proxy alone at a higher rate, %s prompts/s (%s concurrent streams): added p99 %s ms (TTFT %s, chunk %s), "+
					"%s errors, proxy CPU %s%% of a core, %s µs per chunk: what this machine relays without agentd, the load generator and the mock on it too.\n",
					f(hi, "%.0f"), f(a("floor_high.inflight.mean"), "%.0f"), f(a("floor_high.added.p99"), "%.2f"),
					f(a("floor_high.ttft_added.p99"), "%.2f"), f(a("floor_high.chunk.p99"), "%.2f"), f(a("floor_high.errors"), "%.0f"),
					f(a("floor_high.cpu_pct"), "%.0f"), f(a("floor_high.cpu_us_per_chunk"), "%.1f"))
			}
			mdAfterLoad(b, v)
			mdOnePath(b, v)
			continue
		}
		fmt.Fprintf(b, "\nThe floor in the Redis store's runs: the same streams at %s prompts/s through the bare ReverseProxy: added p99 %s ms, "+
			"proxy CPU %s%% of a core, **%s µs per chunk**; agentd on the Redis store at the same rate: %s µs per chunk, %s× the floor's, "+
			"and redis-server %s µs per chunk more.\n",
			f(a("floor.rate"), "%.0f"), f(a("floor.added.p99"), "%.2f"), f(a("floor.cpu_pct"), "%.0f"), f(a("floor.cpu_us_per_chunk"), "%.1f"),
			f(a(atFloor+"cpu_us_per_chunk"), "%.1f"), f(a("cpu_per_chunk_ratio_to_floor"), "%.1f"), f(a(atFloor+"redis_server_cpu_us_per_chunk"), "%.1f"))
		mdAfterLoad(b, v)
		mdOnePath(b, v)
	}
	fmt.Fprintf(b, "\n| added p99 ≤ |")
	for _, v := range stores {
		fmt.Fprintf(b, " highest clean rate (prompts/s)%s | concurrent streams%s |", v.label, v.label)
	}
	fmt.Fprintf(b, "\n|---|%s\n", strings.Repeat("---|---|", len(stores)))
	for _, lim := range []string{"1", "5", "10", "50"} {
		fmt.Fprintf(b, "| %s ms |", lim)
		for _, v := range stores {
			fmt.Fprintf(b, " %s | %s |", fCleanRate(v.agg("capacity", "max_rate.le_"+lim+"ms")), fCleanRate(v.agg("capacity", "concurrency.le_"+lim+"ms")))
		}
		fmt.Fprintf(b, "\n")
	}
	fmt.Fprintf(b, "\n")
}

// cleanRate is the median over the rounds of a highest clean rate (or of
// the concurrency at it), a round without a clean rate counted below every
// rate. Aggregate skips such a round, so that its median of the others
// would overstate the rate and, on an even count, fall between two rates
// the sweep ran (whose CPU per chunk no round measured). This median is the
// lower middle: a value a round measured, or NaN when it falls on a round
// without a clean rate. missing counts those rounds.
func cleanRate(a Agg) (median float64, missing int) {
	if len(a.Rounds) == 0 {
		return a.Median, 0
	}
	vals := make([]float64, len(a.Rounds))
	for i, v := range a.Rounds {
		if !finite(v) {
			v, missing = math.Inf(-1), missing+1
		}
		vals[i] = v
	}
	slices.Sort(vals)
	if m := vals[(len(vals)-1)/2]; finite(m) {
		return m, missing
	}
	return math.NaN(), missing
}

// fCleanRate writes cleanRate's median with the rounds' range, "none" for
// its low end when a round had no clean rate: "100 [none–200]".
func fCleanRate(a Agg) string {
	m, missing := cleanRate(a)
	if !finite(m) {
		return "–"
	}
	s := fmt.Sprintf("%.0f", m)
	switch {
	case missing > 0:
		s += fmt.Sprintf(" <sub>[none–%.0f]</sub>", a.Max)
	case a.Min != a.Max:
		s += fmt.Sprintf(" <sub>[%.0f–%.0f]</sub>", a.Min, a.Max)
	}
	return s
}

// mdAfterLoad writes agentd's RSS after its capacity steps against its
// idle RSS, and the floor's after its heaviest step against its own.
func mdAfterLoad(b *strings.Builder, v storeView) {
	a := func(k string) Agg { return v.agg("capacity", k) }
	if !finite(a("rss.after_load_mib").Median) {
		return
	}
	fmt.Fprintf(b, "After the load (every session deleted, the clients' connections closed): agentd's RSS %s MiB %s s after its last step, "+
		"**%s× its idle %s MiB**, %s× the idle RSS plus the live heap's growth (live heap %s MiB after a forced GC, %s MiB idle; %s goroutines, their stacks %s MiB; "+
		"free heap pages not returned %s MiB, the runtime's span descriptors and metadata %s MiB; peak RSS %s MiB)",
		f(a("rss.after_load_mib"), "%.1f"), f(a("rss.after_load_s"), "%.0f"), f(a("rss.after_load_ratio"), "%.2f"), f(a("rss.idle_mib"), "%.1f"),
		f(a("rss.after_load_live_ratio"), "%.2f"), f(a("rss.after_load_live_mib"), "%.1f"), f(a("rss.idle_live_mib"), "%.1f"),
		f(a("rss.after_load_goroutines"), "%.0f"), f(a("rss.after_load_stacks_mib"), "%.1f"), f(a("rss.after_load_heap_free_mib"), "%.1f"), f(a("rss.after_load_runtime_mib"), "%.1f"),
		f(a("rss.peak_mib"), "%.0f"))
	if finite(a("floor_high.rss.after_load_mib").Median) {
		fmt.Fprintf(b, "; the bare proxy's %s MiB %s s after its %s prompts/s, **%s× its idle %s MiB** (peak RSS %s MiB)",
			f(a("floor_high.rss.after_load_mib"), "%.1f"), f(a("floor_high.rss.after_load_s"), "%.0f"), f(a("floor_high.rate"), "%.0f"),
			f(a("floor_high.rss.after_load_ratio"), "%.2f"), f(a("floor_high.rss.idle_mib"), "%.1f"), f(a("floor_high.rss.peak_mib"), "%.0f"))
	}
	fmt.Fprintf(b, ".\n")
}

// mdOnePath writes the capacity steps at the floor's rate that ran one
// transport each: agentd's CPU per prompt against the floor's per request.
func mdOnePath(b *strings.Builder, v storeView) {
	a := func(k string) Agg { return v.agg("capacity", k) }
	var parts []string
	for _, op := range []struct{ path, label string }{{pathREST, "all REST+SSE"}, {pathGRPC, "all gRPC"}} {
		k := "only." + op.path + "."
		if !finite(a(k + "prompts").Median) {
			continue
		}
		x := fmt.Sprintf("%s, agentd %s µs per prompt (%s µs per chunk, %s%% of a core), **%s× the floor's per request** (%s× per chunk), "+
			"added p99 %s ms, %s errors + drops", op.label, f(a("cpu_us_per_prompt."+op.path), "%.0f"), f(a(k+"cpu_us_per_chunk"), "%.1f"),
			f(a(k+"agentd_cpu_pct"), "%.0f"), f(a("cpu_ratio_to_floor."+op.path), "%.2f"), f(a("cpu_per_chunk_ratio_to_floor."+op.path), "%.2f"),
			f(a(k+"added.p99"), "%.2f"), f(Aggregate(roundsOf(v.onePathBad(op.path)))["v"], "%.0f"))
		if v.redis() {
			x += fmt.Sprintf(", redis-server %s µs per prompt more", f(a(k+"redis_server_cpu_us_per_prompt"), "%.0f"))
		}
		parts = append(parts, x)
	}
	if len(parts) == 0 {
		return
	}
	where := ""
	if v.redis() {
		where = " on the Redis store"
	}
	fmt.Fprintf(b, "One transport at a time%s, at the floor's rate (%s prompts/s, as many prompts as the floor's step; the bare proxy %s µs per request): %s.\n",
		where, f(a("only.rate"), "%.0f"), f(a("cpu_us_per_request.floor"), "%.0f"), strings.Join(parts, "; "))
	if finite(a("grpc_floor.cpu_us_per_request").Median) {
		fmt.Fprintf(b, "The gRPC floor (a bare grpc-go relay of the mock's deltas, a process of its own, four client connections as "+
			"agentd's) at the same rate: %s µs per request (%s µs per chunk, %s%% of a core), **%s× the bare proxy's**, added p99 %s ms, "+
			"%s errors; agentd's all-gRPC step %s× it.\n",
			f(a("grpc_floor.cpu_us_per_request"), "%.0f"), f(a("grpc_floor.cpu_us_per_chunk"), "%.1f"), f(a("grpc_floor.cpu_pct"), "%.0f"),
			f(a("grpc_floor.cpu_ratio_to_floor"), "%.2f"), f(a("grpc_floor.added.p99"), "%.2f"), f(a("grpc_floor.errors"), "%.0f"),
			f(a("cpu_ratio_to_grpc_floor.grpc"), "%.2f"))
	}
}

// onePathBad are the errors, drops and unserved arrivals of the rounds'
// one-transport step on path.
func (v storeView) onePathBad(path string) []float64 {
	k := v.prefix + "only." + path + "."
	var vals []float64
	for _, rr := range v.r.Scenarios["capacity"].Rounds {
		if _, ok := rr[k+"prompts"]; ok {
			vals = append(vals, rr[k+"errors"]+rr[k+"dropped"]+rr[k+"no_session"])
		}
	}
	return vals
}

func roundsOf(vals []float64) []Metrics {
	out := make([]Metrics, len(vals))
	for i, v := range vals {
		out[i] = Metrics{"v": v}
	}
	return out
}

func mdIdle(b *strings.Builder, r *Result) {
	stores := r.stores()
	fmt.Fprintf(b, "## idle-memory\n\nSessions on the default configuration, created bare, then given one prompt each "+
		"(a history of two short messages, on the simulated provider). Heap is Go's HeapAlloc + StackInuse after a forced GC; "+
		"RSS is /proc's VmRSS. Per-session values are the growth over the level divided by its sessions.\n\n")
	fmt.Fprintf(b, "| sessions | heap / session bare | heap / session with history | history part | RSS / session | total heap | total RSS | page tables |\n|---|---|---|---|---|---|---|---|\n")
	levels := []string{"10000", "100000", "100", "200"}
	for _, lv := range levels {
		for _, v := range stores {
			a, kib := v.idleAgg()
			if !finite(a(lv + ".total_live_mib").Median) {
				continue
			}
			fmt.Fprintf(b, "| %s | %s KiB | %s KiB | %s KiB | %s KiB | %s MiB | %s MiB | %s MiB |\n", lv+v.label,
				f(kib("bare."+lv+".heap_per_session_b"), "%.1f"), f(kib(lv+".heap_per_session_b"), "%.1f"),
				f(kib(lv+".history_per_session_b"), "%.2f"), f(kib(lv+".rss_per_session_b"), "%.1f"),
				f(a(lv+".total_live_mib"), "%.0f"), f(a(lv+".total_rss_mib"), "%.0f"), f(a(lv+".pte_mib"), "%.0f"))
		}
	}
	fmt.Fprintf(b, "\n")
	for _, v := range stores {
		a, kib := v.idleAgg()
		if !v.redis() {
			fmt.Fprintf(b, "Idle SSE subscribers (%s, one per session, GET …/events reading nothing after the headers): "+
				"%s KiB heap + stacks each (of which stacks %s KiB), %s KiB RSS each, %s goroutines each.\n\n",
				f(a("subscribers"), "%.0f"), f(kib("subscriber.heap_b"), "%.1f"), f(kib("subscriber.stack_b"), "%.1f"),
				f(kib("subscriber.rss_b"), "%.1f"), f(a("subscriber.goroutines"), "%.1f"))
			fmt.Fprintf(b, "After the load: RSS %s MiB a second after the subscribers left; after deleting every session (%s s) %s MiB "+
				"2 s later, %s MiB 10 s later, %s MiB after a forced GC (Go heap %s MiB); peak RSS %s MiB.\n\n",
				f(a("subscribers_gone.rss_mib"), "%.0f"), f(a("delete_s"), "%.1f"), f(a("after.rss_mib"), "%.0f"),
				f(a("after_10s.rss_mib"), "%.0f"), f(a("after_gc.rss_mib"), "%.0f"), f(a("after.live_mib"), "%.0f"), f(a("peak.rss_mib"), "%.0f"))
			idleAfterBreakdown(b, a)
			continue
		}
		var per []string
		for _, lv := range levels {
			if finite(a(lv + ".redis_server_used_mib").Median) {
				per = append(per, fmt.Sprintf("%s KiB per bare session and %s KiB with its history at %s sessions (%s MiB in all, RSS %s MiB)",
					f(kib("bare."+lv+".redis_server_mem_per_session_b"), "%.2f"), f(kib(lv+".redis_server_mem_per_session_b"), "%.2f"), lv,
					f(a(lv+".redis_server_used_mib"), "%.0f"), f(a(lv+".redis_server_rss_mib"), "%.0f")))
			}
		}
		if len(per) > 0 {
			fmt.Fprintf(b, "On the Redis store, redis-server holds (INFO memory's used_memory, %s MiB at the start): %s; %s MiB after the "+
				"sessions were deleted; peak RSS %s MiB.\n\n", f(a("base.redis_server_used_mib"), "%.1f"), strings.Join(per, "; "),
				f(a("after.redis_server_used_mib"), "%.0f"), f(a("peak.redis_server_rss_mib"), "%.0f"))
		}
		fmt.Fprintf(b, "On the Redis store, idle SSE subscribers (%s): %s KiB heap + stacks each (of which stacks %s KiB), %s KiB RSS each, "+
			"%s goroutines each. After the load: RSS %s MiB a second after the subscribers left; after deleting every session (%s s) %s MiB "+
			"2 s later, %s MiB 10 s later, %s MiB after a forced GC (Go heap %s MiB); peak RSS %s MiB.\n\n",
			f(a("subscribers"), "%.0f"), f(kib("subscriber.heap_b"), "%.1f"), f(kib("subscriber.stack_b"), "%.1f"),
			f(kib("subscriber.rss_b"), "%.1f"), f(a("subscriber.goroutines"), "%.1f"),
			f(a("subscribers_gone.rss_mib"), "%.0f"), f(a("delete_s"), "%.1f"), f(a("after.rss_mib"), "%.0f"),
			f(a("after_10s.rss_mib"), "%.0f"), f(a("after_gc.rss_mib"), "%.0f"), f(a("after.live_mib"), "%.0f"), f(a("peak.rss_mib"), "%.0f"))
	}
}

// idleAfterBreakdown writes where the Go runtime's memory is once every
// session of idle-memory is gone (runtime.MemStats after the forced GC).
func idleAfterBreakdown(b *strings.Builder, a func(string) Agg) {
	if !finite(a("after.sys_mib").Median) {
		return
	}
	fmt.Fprintf(b, "What the Go runtime holds then (runtime.MemStats, less what it returned to the OS): %s MiB, of which the live heap %s, "+
		"unused parts of its spans %s, free spans not yet returned %s, stacks %s, span descriptors %s, the GC's metadata %s, "+
		"the runtime's other structures %s; the rest of the RSS is the binary's and the runtime's own mappings.\n\n",
		f(a("after.sys_mib"), "%.1f"), f(a("after.live_mib"), "%.1f"), f(a("after.heap_unused_mib"), "%.1f"), f(a("after.heap_free_mib"), "%.1f"),
		f(a("after.stack_sys_mib"), "%.1f"), f(a("after.mspan_sys_mib"), "%.1f"), f(a("after.gc_sys_mib"), "%.1f"), f(a("after.other_sys_mib"), "%.1f"))
}

// idleAgg reads the idle-memory metrics of v's runs, as they are and in KiB.
func (v storeView) idleAgg() (a, kib func(k string) Agg) {
	a = func(k string) Agg { return v.agg("idle-memory", k) }
	kib = func(k string) Agg {
		x := a(k)
		x.Median, x.Min, x.Max = x.Median/1024, x.Min/1024, x.Max/1024
		return x
	}
	return a, kib
}

func mdFanout(b *strings.Builder, r *Result) {
	stores := r.stores()
	fmt.Fprintf(b, "## fanout — one session, many subscribers\n\nHalf the subscribers follow over SSE, half over gRPC; "+
		"one more SSE subscriber is stalled (reads nothing, 4 KiB receive buffer, fed a few thousand events first, so that "+
		"agentd's writes to it are blocked). Three paced prompts of 40 deltas, 50 ms apart, per level. Last-subscriber latency: "+
		"per chunk, the latest read over all subscribers less the mock's write.\n\n")
	fmt.Fprintf(b, "| subscribers | stalled one | last-subscriber p50 | p99 | max | any subscriber p99 | CPU µs / chunk / subscriber | backlog toward the stalled one |\n|---|---|---|---|---|---|---|---|\n")
	for _, n := range []string{"1", "10", "100", "1000"} {
		for _, suffix := range []string{"", ".nostall"} {
			for _, v := range stores {
				a := func(k string) Agg { return v.agg("fanout", k) }
				p := "n" + n + suffix + "."
				if !finite(a(p + "last.p99").Median) {
					continue
				}
				st := "yes"
				backlog := f(a(p+"stalled_backlog_end_kib"), "%.0f") + " KiB"
				if suffix != "" {
					st, backlog = "no", "–"
				}
				fmt.Fprintf(b, "| %s | %s | %s ms | %s ms | %s ms | %s ms | %s%s | %s |\n", n+v.label, st,
					f(a(p+"last.p50"), "%.3f"), f(a(p+"last.p99"), "%.3f"), f(a(p+"last.max"), "%.3f"),
					f(a(p+"each.p99"), "%.3f"), f(a(p+"cpu_us_per_chunk_per_sub"), "%.1f"),
					plusRedis(a(p+"redis_server_cpu_us_per_chunk_per_sub"), "%.1f", ""), backlog)
			}
		}
	}
	fmt.Fprintf(b, "\n")
}

func mdRetry(b *strings.Builder, r *Result) {
	a := func(k string) Agg { return r.agg("retry", k) }
	fmt.Fprintf(b, "## retry\n\n")
	if len(r.GoBench) > 0 {
		fmt.Fprintf(b, "Go benchmarks of `internal/retry` (`go test -bench`, one run per round):\n\n| benchmark | ns/op | B/op | allocs/op |\n|---|---|---|---|\n")
		names := make([]string, 0, len(r.GoBench))
		for n := range r.GoBench {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			m := r.GoBench[n]
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", strings.TrimPrefix(n, "Benchmark"), f(m["ns_op"], "%.0f"), f(m["b_op"], "%.0f"), f(m["allocs_op"], "%.0f"))
		}
		fmt.Fprintf(b, "\n")
	}
	bg := make([]string, 0, len(rtComponents))
	for _, c := range rtComponents {
		bg = append(bg, c+" "+f(a("redis.rt_background_"+c+"_per_s"), "%.1f"))
	}
	fmt.Fprintf(b, "End to end through agentd and the mock (gRPC prompts, 8-delta answers, base_delay_ms 1). Per attempt: the phase's "+
		"per-prompt value less the happy path's, over its failed attempts. Redis round trips are agentd's own count "+
		"(`agentd_redis_round_trips_total`, scraped around each phase, a scrape's own round trips subtracted): a command, a script "+
		"run or a whole pipeline is one. Besides, the commands clients sent (MONITOR: each command of a pipeline counts) and "+
		"the commands Redis ran (INFO commandstats: those Lua scripts ran included). All less the idle background "+
		"(round trips/s: %s; commands sent %s/s).\n\n",
		strings.Join(bg, ", "), f(a("redis.redis_background_sent_per_s"), "%.1f"))
	labels := map[string]string{"happy": "happy path", "retried": "3 × 503, then ok", "rotation": "usage limit → credential switch", "fallback": "529 → model fallback"}
	phases := []string{"happy", "retried", "rotation", "fallback"}
	fmt.Fprintf(b, "| store | phase | CPU µs / prompt | CPU µs / retried attempt | events / prompt | events / attempt | Redis round trips / prompt | round trips / attempt | commands sent / prompt (MONITOR) | commands sent / attempt (MONITOR) | commands run / prompt (INFO) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, store := range []string{"memory", "redis"} {
		for _, ph := range phases {
			k := store + "." + ph + "."
			if !finite(a(k + "cpu_us_per_prompt").Median) {
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", store, labels[ph],
				f(a(k+"cpu_us_per_prompt"), "%.0f"), f(a(k+"cpu_us_per_attempt"), "%.0f"),
				f(a(k+"events_per_prompt"), "%.1f"), f(a(k+"events_per_attempt"), "%.1f"),
				f(a(k+"rt_total_per_prompt"), "%.2f"), f(a(k+"rt_total_per_attempt"), "%.2f"),
				f(a(k+"redis_sent_per_prompt"), "%.2f"), f(a(k+"redis_sent_per_attempt"), "%.2f"),
				f(a(k+"redis_cmds_per_prompt"), "%.1f"))
		}
	}
	fmt.Fprintf(b, "\n")
	if !finite(a("redis.happy.rt_total_per_prompt").Median) {
		return
	}
	fmt.Fprintf(b, "Redis round trips by component, on the Redis store: per prompt, and per failed attempt (the phase's per-prompt value "+
		"less the happy path's, over its failed attempts). *credentials* is the credential store, *cooldowns* the model cooldowns, "+
		"*sessions* the shared sessions (records, histories, events, leases, notifications), *budget* the shared retry budget, *other* the rest (connection "+
		"handshakes, PING, SCRIPT LOAD).\n\n")
	fmt.Fprintf(b, "| phase |")
	for _, c := range rtComponents {
		fmt.Fprintf(b, " %s / prompt |", c)
	}
	for _, c := range rtComponents {
		fmt.Fprintf(b, " %s / attempt |", c)
	}
	fmt.Fprintf(b, "\n|---|%s\n", strings.Repeat("---|", 2*len(rtComponents)))
	for _, ph := range phases {
		k := "redis." + ph + "."
		if !finite(a(k + "rt_total_per_prompt").Median) {
			continue
		}
		fmt.Fprintf(b, "| %s |", labels[ph])
		for _, c := range rtComponents {
			fmt.Fprintf(b, " %s |", f(a(k+"rt_"+c+"_per_prompt"), "%.2f"))
		}
		for _, c := range rtComponents {
			fmt.Fprintf(b, " %s |", f(a(k+"rt_"+c+"_per_attempt"), "%.2f"))
		}
		fmt.Fprintf(b, "\n")
	}
	fmt.Fprintf(b, "\n")
}
