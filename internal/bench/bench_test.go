package bench

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/redistest"
)

func TestDistQuantiles(t *testing.T) {
	var d Dist
	if !math.IsNaN(d.Q(.5)) {
		t.Fatal("empty quantile is not NaN")
	}
	for i := 100; i >= 1; i-- {
		d.Add(float64(i))
	}
	s := d.Summary()
	if s.N != 100 || s.P50 != 50 || s.P90 != 90 || s.P99 != 99 || s.Max != 100 || s.Mean != 50.5 {
		t.Fatalf("summary = %+v", s)
	}
}

func TestAggregate(t *testing.T) {
	agg := Aggregate([]Metrics{{"a": 3, "b": 1}, {"a": 1}, {"a": 2, "b": math.NaN()}})
	if a := agg["a"]; a.Median != 2 || a.Min != 1 || a.Max != 3 || len(a.Rounds) != 3 {
		t.Fatalf("a = %+v", a)
	}
	if b := agg["b"]; b.Median != 1 || b.Min != 1 {
		t.Fatalf("b = %+v", b)
	}
	// Non-finite values are written as null.
	out, err := json.Marshal(map[string]any{"m": Metrics{"x": math.Inf(1)}, "a": agg["b"]})
	if err != nil || !strings.Contains(string(out), `"x":null`) || !strings.Contains(string(out), "null") {
		t.Fatalf("json = %s, %v", out, err)
	}
}

// agentd's SSE frames and a provider's, as the clients read them.
func TestReadSSE(t *testing.T) {
	agentd := "id: 1\nevent: agent_start\ndata: {\"type\":\"agent_start\"}\n\n" +
		": ping\n\n" +
		"id: 2\nevent: message_update\ndata: {\"messageUpdate\":{\"textDelta\":\"s1751642570000000001a1751642569000000002 \"}}\n\n" +
		"id: 3\nevent: message_end\ndata: {\"messageEnd\":{\"text\":\"s1751642570000000001a1751642569000000002 \"}}\n\n" +
		"id: 4\nevent: prompt_end\ndata: {\"type\":\"prompt_end\",\"promptEnd\":{\"outcome\":\"completed\"}}\n\n" +
		"id: 5\nevent: agent_start\ndata: {}\n\n"
	tr := &Turn{Types: map[string]int{}}
	if err := readSSE(strings.NewReader(agentd), tr); err != nil {
		t.Fatal(err)
	}
	if tr.Outcome != "completed" || tr.Events != 4 || len(tr.Deltas) != 1 || tr.Deltas[0].Write != 1751642570000000001 ||
		tr.Types["message_end"] != 1 || promptEnds(tr) != 1 || tr.End == 0 {
		t.Fatalf("turn = %+v", tr)
	}
	provider := "event: message_start\ndata: {}\n\nevent: content_block_delta\ndata: {\"delta\":{\"text\":\"s1751642570000000001a1751642569000000002 \"}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	tr = &Turn{}
	if err := readSSE(strings.NewReader(provider), tr); err != nil || tr.Outcome != "completed" || len(tr.Deltas) != 1 {
		t.Fatalf("provider turn = %+v, %v", tr, err)
	}
	// A stream that ends early is an error.
	if err := readSSE(strings.NewReader("event: message_start\ndata: {}\n\n"), &Turn{}); err == nil {
		t.Fatal("a cut stream read as complete")
	}
	// Lines longer than the reader's buffer.
	long := "event: message_update\ndata: " + strings.Repeat("x", 40<<10) + "\n\nevent: prompt_end\ndata: {\"outcome\":\"failed\"}\n\n"
	tr = &Turn{}
	if err := readSSE(strings.NewReader(long), tr); err != nil || tr.Outcome != "failed" {
		t.Fatalf("long frames: %+v, %v", tr, err)
	}
}

func TestReadProcSelf(t *testing.T) {
	s, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS <= 0 || s.Threads <= 0 || s.FDs <= 0 || s.CPU <= 0 {
		t.Fatalf("sample = %+v", s)
	}
	// Spin until the sample shows 20 ms more CPU: on a loaded machine a
	// fixed wall time of spinning may get less than that. The deadline only
	// bounds a broken reading.
	deadline := time.Now().Add(30 * time.Second)
	var s2 ProcSample
	for {
		for range 1_000_000 {
		}
		if s2, err = ReadProc(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if s2.CPU >= s.CPU+20*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU went from %v to %v over 30 s of spinning", s.CPU, s2.CPU)
		}
	}
	if m := ReadMachineCPU(); m.Total <= 0 || m.Busy <= 0 {
		t.Fatalf("machine = %+v", m)
	}
	if d := DescribeMachine(); d.Cores <= 0 || d.GoVersion == "" {
		t.Fatalf("machine = %+v", d)
	}
}

func TestRedisCalls(t *testing.T) {
	total, by := redisCalls(map[string]int64{"evalsha": 3, "info": 1}, map[string]int64{"evalsha": 5, "info": 9, "hget": 2})
	if total != 4 || by["evalsha"] != 2 || by["hget"] != 2 || by["info"] != 0 {
		t.Fatalf("total %d, by %v", total, by)
	}
}

// The Redis round trips come from agentd's /metrics, by component.
func TestParseCounters(t *testing.T) {
	const page = `# HELP agentd_redis_round_trips_total Round trips to Redis.
# TYPE agentd_redis_round_trips_total counter
agentd_redis_round_trips_total{component="cooldowns"} 3
agentd_redis_round_trips_total{component="credentials"} 1.5e+06
agentd_redis_round_trips_total{component="other",x="a\\\"b}"} 7 1700000000000
agentd_redis_round_trips_total_more{component="sessions"} 99
agentd_redis_round_trip_seconds_bucket{component="sessions",le="0.001"} 5
agentd_redis_round_trips_total{component="sessions"} 42
`
	got, err := parseCounters(strings.NewReader(page), "agentd_redis_round_trips_total", "component")
	want := map[string]float64{"cooldowns": 3, "credentials": 1.5e6, "other": 7, "sessions": 42}
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("parseCounters = %v, %v; want %v", got, err, want)
	}
	if _, err := parseCounters(strings.NewReader("# TYPE agentd_x counter\n"), "agentd_redis_round_trips_total", "component"); !errors.Is(err, errNoMetric) {
		t.Fatalf("parseCounters of a page without the metric: %v", err)
	}
	if v := labelValue(`a="x,y",component="cred\"s\\"`, "component"); v != `cred"s\` {
		t.Fatalf("labelValue = %q", v)
	}
	// The bench reads the components agentd counts.
	if !slices.Equal(rtComponents, metrics.RedisComponents) {
		t.Fatalf("rtComponents %v, agentd counts %v", rtComponents, metrics.RedisComponents)
	}
}

func TestLoopbackIP(t *testing.T) {
	if ip := loopbackIP(0); ip.String() != "127.0.0.2" {
		t.Fatalf("loopbackIP(0) = %s", ip)
	}
	if ip := loopbackIP(45000); ip.String() != "127.0.0.4" || !ip.IsLoopback() {
		t.Fatalf("loopbackIP(45000) = %s", ip)
	}
}

// The capacity metrics of a run whose steps at the floor's rate (100/s)
// all measured: all REST+SSE 1.4× the floor's CPU, all gRPC 1.5×.
func capacityAtFloor() Metrics {
	m := Metrics{"rate.100.prompts": 700, "rate.100.added.p99": 4, "rate.100.cpu_us_per_chunk": 30,
		"max_rate.le_10ms": 100, "concurrency_max.le_10ms": 1200,
		"only.rate": 100, "only.rest.prompts": 700, "only.rest.errors": 0, "only.rest.cpu_us_per_prompt": 840, "only.rest.cpu_us_per_chunk": 42,
		"only.grpc.prompts": 700, "only.grpc.errors": 2, "only.grpc.cpu_us_per_prompt": 900, "only.grpc.cpu_us_per_chunk": 45,
		"floor.rate": 100, "floor.cpu_us_per_request": 600, "floor.cpu_us_per_chunk": 25, "grpc_floor.cpu_us_per_request": 750}
	putCPURatios(m, 100)
	return m
}

// The ratios to the floor: set when both sides were measured.
func TestPutCPURatios(t *testing.T) {
	m := capacityAtFloor()
	for k, want := range map[string]float64{"cpu_ratio_to_floor.rest": 1.4, "cpu_ratio_to_floor.grpc": 1.5,
		"cpu_per_chunk_ratio_to_floor.rest": 1.68, "cpu_per_chunk_ratio_to_floor.grpc": 1.8, "cpu_per_chunk_ratio_to_floor": 1.2,
		"cpu_us_per_prompt.rest": 840, "cpu_us_per_prompt.grpc": 900, "cpu_us_per_request.floor": 600,
		"grpc_floor.cpu_ratio_to_floor": 1.25, "cpu_ratio_to_grpc_floor.grpc": 1.2} {
		if got, ok := m[k]; !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v (set %v), want %v", k, got, ok, want)
		}
	}
	// No floor, a gRPC step that failed, a sweep that stopped short of the
	// floor's rate: no ratio.
	m = Metrics{"rate.50.cpu_us_per_chunk": 30, "only.rest.cpu_us_per_prompt": 840, "only.rest.cpu_us_per_chunk": 42}
	putCPURatios(m, 100)
	for k := range m {
		if strings.Contains(k, "ratio") || k == "cpu_us_per_prompt.grpc" || k == "cpu_us_per_request.floor" {
			t.Errorf("without a floor: %s = %v", k, m[k])
		}
	}
	m = Metrics{"rate.50.cpu_us_per_chunk": 30, "only.rest.cpu_us_per_prompt": 840, "floor.cpu_us_per_request": 600, "floor.cpu_us_per_chunk": 25}
	putCPURatios(m, 100)
	if _, ok := m["cpu_per_chunk_ratio_to_floor"]; ok {
		t.Error("a per-chunk ratio without the sweep's step at the floor's rate")
	}
	if _, ok := m["cpu_ratio_to_floor.grpc"]; ok {
		t.Error("a gRPC ratio without the gRPC step")
	}
	if m["cpu_ratio_to_floor.rest"] != 1.4 {
		t.Errorf("REST+SSE ratio %v", m["cpu_ratio_to_floor.rest"])
	}
}

// The report renders any result, the targets judged on the medians.
func TestMarkdownAndTargets(t *testing.T) {
	res := &Result{Started: time.Now(), Machine: DescribeMachine(), Rounds: 1, Scenarios: map[string]*ScenarioResult{
		"overhead": {Rounds: []Metrics{{"added_ttft.rest.p50": 0.4, "added_ttft.rest.p99": 3, "ratio_to_floor.rest.p50": 1.2,
			"added_ttft.grpc.p50": 0.3, "added_ttft.grpc.p99": 1, "ratio_to_floor.grpc.p50": 2, "ttft.direct.n": 10,
			"added_ttft.grpc_floor.p50": 0.2, "ratio_to_floor.grpc_floor.p50": 1.3333, "ratio_to_grpc_floor.grpc.p50": 1.5}}},
		"capacity":    {Rounds: []Metrics{capacityAtFloor()}},
		"idle-memory": {Rounds: []Metrics{{}}, Errors: []string{"round 1: boom"}},
		"fanout":      {Rounds: []Metrics{{"n100.last.p99": 4, "n100.nostall.last.p99": 4.1, "stall_effect.p99_ms": -0.1, "n100.cpu_us_per_chunk_per_sub": 50}}},
		"retry": {Rounds: []Metrics{{"redis.happy.cpu_us_per_prompt": 100, "redis.happy.rt_total_per_prompt": 15,
			"redis.happy.rt_credentials_per_prompt": 0, "redis.happy.rt_sessions_per_prompt": 14.5,
			"redis.rotation.cpu_us_per_prompt": 200, "redis.rotation.rt_total_per_prompt": 19, "redis.rotation.rt_credentials_per_attempt": 2,
			"redis.happy.redis_sent_per_prompt": 40}}},
	}, GoBench: map[string]map[string]Agg{
		"BenchmarkDecision/a": {"ns_op": {Median: 9000}, "allocs_op": {Median: 12}},
		"BenchmarkDecision/b": {"ns_op": {Median: 12000}, "allocs_op": {Median: 31}},
	}}
	for _, s := range res.Scenarios {
		s.Aggregate = Aggregate(s.Rounds)
	}
	res.Targets = evaluateTargets(res)
	want := map[string]string{
		"added TTFT p50, REST+SSE":                                    "met",
		"added TTFT p99, REST+SSE":                                    "not met",
		"added TTFT p50 / floor's, gRPC":                              "not met",
		"agentd CPU per relayed chunk (capacity)":                     "met",
		"concurrent streaming sessions with added p99 ≤ 10 ms":        "met",
		"CPU per prompt / floor's per request, REST+SSE":              "met",
		"CPU per prompt / floor's per request, gRPC":                  "not met",
		"idle SSE subscriber, heap + stacks":                          "not measured",
		"last-subscriber p99 at 100 subscribers":                      "met",
		"retry decision time (Classify + Plan), worst ordinary error": "not met",
		"retry decision allocations, worst ordinary error":            "not met",
		"Redis round trips per prompt, happy path":                    "met",
		"Redis round trips per credential rotation":                   "not met",
	}
	for _, tg := range res.Targets {
		w, ok := want[tg.Name]
		if !ok {
			continue
		}
		got := "not measured"
		if tg.Met != nil {
			got = map[bool]string{true: "met", false: "not met"}[*tg.Met]
		}
		if got != w {
			t.Errorf("%s: %s (%s), want %s", tg.Name, got, tg.Value, w)
		}
		delete(want, tg.Name)
	}
	for name := range want {
		t.Errorf("target %q missing", name)
	}
	md := Markdown(res)
	for _, s := range []string{"## Targets", "## overhead", "## capacity", "| 100 |", "## fanout", "## retry", "Decision/b", "boom",
		"| redis | happy path | 100 | – | – | – | 15.00 | – | 40.00 |", "| credentials / prompt | cooldowns / prompt | sessions / prompt | budget / prompt | other / prompt |",
		"| happy path | 0.00 | – | 14.50 | – |", "sessions 14.50 (by design)",
		"| CPU per prompt / floor's per request, REST+SSE | ≤ 1.5× | 1.40× (agentd 840 µs per prompt, the bare proxy 600 µs per request, at 100 prompts/s, all over REST+SSE; per chunk 1.68×) | **met** |",
		"| CPU per prompt / floor's per request, gRPC | ≤ 1.3× | 1.50× (agentd 900 µs per prompt, the bare proxy 600 µs per request, at 100 prompts/s, all over gRPC; per chunk 1.80×; the gRPC floor (a bare grpc-go relay) 750 µs per request, 1.25× the bare proxy's, and agentd 1.20× the gRPC floor's; 2 errors or drops) | **not met** |",
		"One transport at a time, at the floor's rate (100 prompts/s, as many prompts as the floor's step; the bare proxy 600 µs per request): " +
			"all REST+SSE, agentd 840 µs per prompt (42.0 µs per chunk, –% of a core), **1.40× the floor's per request** (1.68× per chunk), added p99 – ms, 0 errors + drops; " +
			"all gRPC, agentd 900 µs per prompt (45.0 µs per chunk, –% of a core), **1.50× the floor's per request** (1.80× per chunk), added p99 – ms, 2 errors + drops.\n",
		"the gRPC floor (a bare grpc-go relay) adds 0.200 ms, 1.33× the floor's, and agentd 1.50× the gRPC floor's"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
}

// A round whose sweep had no clean step counts below every rate: three
// rounds clean up to 200, 100 and none have 100 as their highest clean
// rate (the median of the two that had one, 150, is a rate no round ran),
// and the per-chunk target reads the CPU per chunk measured at 100.
func TestCleanRateCountsRoundsWithout(t *testing.T) {
	round := func(best, conc float64) Metrics {
		m := capacityAtFloor()
		m["rate.200.cpu_us_per_chunk"] = 20
		m["max_rate.le_10ms"], m["concurrency.le_10ms"], m["concurrency_max.le_10ms"] = best, conc, conc
		if !finite(best) {
			m["concurrency_max.le_10ms"] = 0
		}
		return m
	}
	res := &Result{Started: time.Now(), Machine: DescribeMachine(), Rounds: 3, Scenarios: map[string]*ScenarioResult{
		"capacity": {Rounds: []Metrics{round(200, 250), round(100, 127), round(math.NaN(), math.NaN())}},
	}}
	for _, s := range res.Scenarios {
		s.Aggregate = Aggregate(s.Rounds)
	}
	if a := res.agg("capacity", "max_rate.le_10ms"); a.Median != 150 {
		t.Fatalf("the aggregate's median %v: the case this test is about is gone", a.Median)
	}
	if m, missing := cleanRate(res.agg("capacity", "max_rate.le_10ms")); m != 100 || missing != 1 {
		t.Fatalf("cleanRate = %v, %d missing; want 100, 1", m, missing)
	}
	if m, _ := cleanRate(Agg{Rounds: []float64{100, math.NaN(), math.NaN()}}); finite(m) {
		t.Fatalf("cleanRate with two rounds of three without a clean rate = %v, want none", m)
	}
	if m, _ := cleanRate(Agg{Rounds: []float64{100, 300}}); m != 100 {
		t.Fatalf("cleanRate of an even count = %v, want the lower middle, 100", m)
	}
	for _, c := range []struct {
		a    Agg
		want string
	}{
		{Aggregate([]Metrics{{"r": 100}, {"r": 300}, {"r": 200}})["r"], "200 <sub>[100–300]</sub>"},
		{Aggregate([]Metrics{{"r": 200}, {"r": 200}})["r"], "200"},
		{Aggregate([]Metrics{{"r": 100}, {}, {}})["r"], "–"},
	} {
		if got := fCleanRate(c.a); got != c.want {
			t.Errorf("fCleanRate(%v) = %q, want %q", c.a.Rounds, got, c.want)
		}
	}
	res.Targets = evaluateTargets(res)
	found := 0
	for _, tg := range res.Targets {
		switch tg.Name {
		case "agentd CPU per relayed chunk (capacity)":
			found++
			if tg.Value != "30.0 µs" || !strings.Contains(tg.Note, "at 100 prompts/s") || tg.Met == nil || !*tg.Met {
				t.Errorf("per-chunk target: %q (%s), met %v", tg.Value, tg.Note, tg.Met)
			}
		case "concurrent streaming sessions with added p99 ≤ 10 ms":
			found++
			if !strings.Contains(tg.Note, "highest clean rate 100 prompts/s") || tg.Value != "127" {
				t.Errorf("concurrency target: %q (%s)", tg.Value, tg.Note)
			}
		}
	}
	if found != 2 {
		t.Fatalf("%d of the 2 targets found", found)
	}
	if md := Markdown(res); !strings.Contains(md, "| 10 ms | 100 <sub>[none–200]</sub> | 127 <sub>[none–250]</sub> |") {
		t.Errorf("markdown's clean-rate table:\n%s", md)
	}
}

func TestStores(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want []string
	}{{nil, []string{"memory"}}, {[]string{"redis"}, []string{"redis"}}, {[]string{"memory", "redis", "memory"}, []string{"memory", "redis"}}} {
		got, err := storesOf(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("storesOf(%v) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if _, err := storesOf([]string{"etcd"}); err == nil {
		t.Error("storesOf accepted etcd")
	}
	if storeKey(StoreMemory, "a.b") != "a.b" || storeKey(StoreRedis, "a.b") != "redis.a.b" {
		t.Error("storeKey")
	}
	if runTag(2, StoreMemory) != "round 2" || runTag(2, StoreRedis) != "round 2 redis" {
		t.Error("runTag")
	}
	if _, err := Run(t.Context(), Config{Bin: "/nonexistent", Out: t.TempDir(), Stores: []string{"etcd"}}); err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Errorf("Run with store etcd: %v", err)
	}
}

// The bench's own redis-server answers its commands.
func TestRedisCommands(t *testing.T) {
	redistest.Require(t)
	r, err := StartRedis(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop(5 * time.Second)
	if v, err := r.Do("SET", "k", "v w"); err != nil || v != "OK" {
		t.Fatalf("SET: %q, %v", v, err)
	}
	if v, err := r.Do("GET", "k"); err != nil || v != "v w" {
		t.Fatalf("GET: %q, %v", v, err)
	}
	if _, err := r.Do("NOSUCH"); err == nil {
		t.Fatal("an unknown command is no error")
	}
	if n, err := r.UsedMemory(); err != nil || n <= 0 {
		t.Fatalf("used memory %d, %v", n, err)
	}
	if cs, err := r.CommandStats(); err != nil || cs["set"] != 1 || cs["get"] != 1 {
		t.Fatalf("commandstats %v, %v", cs, err)
	}
	if _, err := r.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Do("GET", "k"); err != nil || v != "" {
		t.Fatalf("GET after FLUSHALL: %q, %v", v, err)
	}
}

// With the Redis store, its rows and targets sit beside the memory store's
// (metrics prefixed "redis."); without it the report has no trace of it.
func TestMarkdownStores(t *testing.T) {
	rounds := func(m Metrics) []Metrics {
		both := Metrics{}
		for k, v := range m {
			both[k] = v
			both["redis."+k] = v * 2
		}
		both["redis.rate.100.redis_server_cpu_us_per_chunk"] = 7
		both["redis.n100.redis_server_cpu_us_per_chunk_per_sub"] = 3
		both["redis.100.redis_server_used_mib"] = 5
		both["redis.only.rest.redis_server_cpu_us_per_prompt"] = 90
		return []Metrics{both}
	}
	capacity := capacityAtFloor()
	delete(capacity, "rate.100.added.p99")
	res := &Result{Started: time.Now(), Machine: DescribeMachine(), Rounds: 1, Stores: []string{StoreMemory, StoreRedis}, Scenarios: map[string]*ScenarioResult{
		"overhead": {Rounds: rounds(Metrics{"added_ttft.grpc.p50": 0.3, "added_ttft.floor.p50": 0.1, "ttft.direct.n": 10})},
		"capacity": {Rounds: rounds(capacity)},
		"idle-memory": {Rounds: rounds(Metrics{"100.total_live_mib": 3, "bare.100.heap_per_session_b": 1024,
			"subscriber.heap_b": 40000, "subscribers": 100})},
		"fanout": {Rounds: rounds(Metrics{"n100.last.p99": 4, "n100.cpu_us_per_chunk_per_sub": 30})},
	}}
	for _, s := range res.Scenarios {
		s.Aggregate = Aggregate(s.Rounds)
	}
	res.Targets = evaluateTargets(res)
	var names []string
	for _, tg := range res.Targets {
		names = append(names, tg.Name)
	}
	// Each Redis row follows its memory row.
	for _, n := range []string{"added TTFT p50, gRPC", "agentd CPU per relayed chunk (capacity)", "idle SSE subscriber, heap + stacks",
		"last-subscriber p99 at 100 subscribers", "CPU per prompt / floor's per request, REST+SSE", "CPU per prompt / floor's per request, gRPC"} {
		i := slices.Index(names, n)
		if i < 0 || i+1 >= len(names) || names[i+1] != n+", Redis store" {
			t.Errorf("target %q and its Redis row: %v", n, names)
		}
	}
	for _, tg := range res.Targets {
		if tg.Name == "last-subscriber p99 at 100 subscribers, Redis store" && (tg.Met == nil || *tg.Met || tg.Value != "8.000 ms") {
			t.Errorf("%s: %s %v", tg.Name, tg.Value, tg.Met)
		}
		if tg.Name == "CPU per prompt / floor's per request, REST+SSE, Redis store" &&
			(tg.Met == nil || *tg.Met || tg.Value != "2.80×" || !strings.Contains(tg.Note, "redis-server 90 µs per prompt more")) {
			t.Errorf("%s: %s %v (%s)", tg.Name, tg.Value, tg.Met, tg.Note)
		}
	}
	md := Markdown(res)
	for _, s := range []string{"ran agentd on the memory store and the Redis store",
		"| agentd gRPC | – ms | – ms | 0.300 ms |", "| agentd gRPC, Redis store | – ms | – ms | 0.600 ms |", "| bare ReverseProxy (floor) |",
		"| 100 | – | – | – ms |", "| 100, Redis store |", "(+ 7.0 redis-server)",
		"concurrent streams, Redis store |", "| 100, Redis store | 2.0 KiB |", "redis-server holds",
		"| 100, Redis store | yes |", "60.0 (+ 3.0 redis-server)",
		"One transport at a time on the Redis store, at the floor's rate (200 prompts/s", "added p99 – ms, 0 errors + drops, redis-server 90 µs per prompt more; all gRPC"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	// The memory store alone: no Redis rows, targets or notes.
	res.Stores = nil
	res.Targets = evaluateTargets(res)
	for _, tg := range res.Targets {
		if strings.Contains(tg.Name, "Redis store") {
			t.Errorf("memory-only target %q", tg.Name)
		}
	}
	if md := Markdown(res); strings.Contains(md, "Redis store") || strings.Contains(md, "redis-server") {
		t.Errorf("memory-only markdown mentions Redis:\n%s", md)
	}
}
