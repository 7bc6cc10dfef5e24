package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/bench/mock"
)

type capacityParams struct {
	Rates       []int         // prompts per second, swept upward
	Step, Warm  time.Duration // each rate runs Step; latencies of prompts due after Warm count
	Tokens      int           // text deltas per stream
	ChunkMs     int           // milliseconds between two frames of a stream
	Limits      []float64     // added p99 thresholds (ms)
	StopErrFrac float64       // a step with more errors or drops than this ends the sweep
	StopP99     float64       // … or with an added p99 above this (ms)
	FloorRate   int           // the rate also run through the bare proxy
	// FloorHighRate, when set, is run through the bare proxy too: a rate
	// with more than 1000 concurrent streams, to tell what this machine can
	// relay at the capacity target's scale without agentd.
	FloorHighRate int
}

// capacityMix is the transport a capacity step's prompts take.
type capacityMix int

const (
	mixHalf capacityMix = iota // alternately REST+SSE and gRPC: the sweep
	mixREST                    // all REST+SSE
	mixGRPC                    // all gRPC
)

// label is how progress lines name the step's transports.
func (x capacityMix) label() string {
	return [...]string{mixHalf: "", mixREST: " all REST+SSE", mixGRPC: " all gRPC"}[x]
}

// onePathSteps are the steps at the floor's rate that run one transport
// each: their CPU per prompt against the floor's per request.
var onePathSteps = []struct {
	path string
	mix  capacityMix
}{{pathREST, mixREST}, {pathGRPC, mixGRPC}}

func capacityParamsFor(quick bool) capacityParams {
	p := capacityParams{
		Rates: []int{100, 200, 300, 400, 500, 600, 800},
		Step:  7 * time.Second, Warm: 2 * time.Second, Tokens: 20, ChunkMs: 50,
		Limits: []float64{1, 5, 10, 50}, StopErrFrac: 0.01, StopP99: 1000, FloorRate: 300,
		FloorHighRate: 800,
	}
	if quick {
		p.Rates, p.Step, p.Warm, p.Tokens, p.ChunkMs, p.FloorRate = []int{20}, 1500*time.Millisecond, 300*time.Millisecond, 5, 10, 20
		p.FloorHighRate = 40
	}
	if v := os.Getenv("AGENTD_BENCH_CAPACITY_RATES"); v != "" {
		var rates []int
		for _, f := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
				rates = append(rates, n)
			}
		}
		if len(rates) > 0 {
			p.Rates = rates
		}
	}
	return p
}

// streamDuration is how long the mock takes to play one capacity stream:
// Anthropic's frames are message_start, content_block_start, ping, the
// deltas, content_block_stop, message_delta and message_stop.
func (p capacityParams) streamDuration() time.Duration {
	return time.Duration(p.Tokens+5) * time.Duration(p.ChunkMs) * time.Millisecond
}

// runCapacity: an open-loop sweep of prompts per second, each prompt on an
// idle session of a pool, half of them over REST+SSE and half over gRPC;
// every stream paced (Tokens deltas, ChunkMs apart). Latency counts from
// each prompt's scheduled time, so a slow agentd cannot hide its queueing
// (no coordinated omission). "Added" latency is everything but the mock's
// own pacing: the request's inbound time plus the first chunk's transit
// (TTFT), and each chunk's transit from the mock's write to the client's
// read. On the Redis store, redis-server's CPU is measured too (and is not
// counted as other load). After the sweep, the floor's rate runs twice
// more, all over REST+SSE and all over gRPC, then through the bare proxy:
// agentd's CPU per prompt on each path against the proxy's per request.
func runCapacity(ctx context.Context, e *Env, round int, store string) (Metrics, error) {
	p := capacityParamsFor(e.Cfg.Quick)
	headers := map[string]string{
		"X-Mock-Stamp": "1", "X-Mock-Tokens": strconv.Itoa(p.Tokens), "X-Mock-Chunk-Delay-Ms": strconv.Itoa(p.ChunkMs),
	}
	a, err := e.StartAgentdOn(store, "capacity", round, "providers:\n"+e.MockProvider("mock", "anthropic", headers))
	if err != nil {
		return nil, err
	}
	defer a.Stop(15 * time.Second)
	c, err := NewClient(a, capacityGRPCConns)
	if err != nil {
		return nil, err
	}
	defer c.Close()

	m := Metrics{}
	m["tokens"], m["chunk_ms"] = float64(p.Tokens), float64(p.ChunkMs)
	// agentd's RSS before its first session: the idle level the RSS after
	// the load is held against.
	m["rss.idle_mib"] = mibOf(a.Sample().RSS)
	if ms, err := a.Mem(ctx, true); err == nil {
		m["rss.idle_live_mib"] = mibOf(int64(ms.Live))
	}
	type stepResult struct {
		rate             int
		addedP99, conc   float64
		clean, completed bool
	}
	var steps []stepResult
	for _, rate := range p.Rates {
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		sm, err := capacityStep(ctx, e, a, c, round, rate, store, p, mixHalf)
		for k, v := range sm {
			m[fmt.Sprintf("rate.%d.%s", rate, k)] = v
		}
		if err != nil {
			e.Note("capacity", "%s rate %d/s: %v", runTag(round, store), rate, err)
			break
		}
		bad := sm["errors"] + sm["no_session"] + sm["dropped"]
		steps = append(steps, stepResult{rate: rate, addedP99: sm["added.p99"], conc: sm["inflight.mean"],
			clean: bad == 0, completed: true})
		if bad > p.StopErrFrac*sm["prompts"] || sm["added.p99"] > p.StopP99 || a.Exited() {
			e.Note("capacity", "%s: sweep stopped at %d/s (saturated: %.0f errors or drops of %.0f prompts, added p99 %.1f ms)",
				runTag(round, store), rate, bad, sm["prompts"], sm["added.p99"])
			break
		}
	}
	for _, lim := range p.Limits {
		best, conc := math.NaN(), math.NaN()
		for _, s := range steps {
			if s.clean && s.addedP99 <= lim {
				best, conc = float64(s.rate), s.conc
			}
		}
		m[fmt.Sprintf("max_rate.le_%gms", lim)] = best
		m[fmt.Sprintf("concurrency.le_%gms", lim)] = conc
	}
	maxConc := 0.0
	for _, s := range steps {
		if s.clean && s.addedP99 <= 10 {
			maxConc = math.Max(maxConc, s.conc)
		}
	}
	m["concurrency_max.le_10ms"] = maxConc
	// The floor's rate again, one transport at a time (whether or not the
	// sweep got there: a saturated step still tells its CPU per prompt, and
	// its errors are noted).
	for _, op := range onePathSteps {
		if ctx.Err() != nil || a.Exited() {
			break
		}
		m["only.rate"] = float64(p.FloorRate)
		sm, err := capacityStep(ctx, e, a, c, round, p.FloorRate, store, p, op.mix)
		for k, v := range sm {
			m["only."+op.path+"."+k] = v
		}
		if err != nil {
			e.Note("capacity", "%s all-%s at %d/s: %v", runTag(round, store), op.path, p.FloorRate, err)
			continue
		}
		if bad := sm["errors"] + sm["no_session"] + sm["dropped"]; bad > 0 {
			e.Note("capacity", "%s all-%s at %d/s: %.0f errors or drops of %.0f prompts", runTag(round, store), op.path, p.FloorRate, bad, sm["prompts"])
		}
	}
	// agentd's load has ended, and every session of its steps is deleted:
	// the clients close their idle connections, as a load tool that has
	// finished does, and agentd's RSS is read again once it has been idle
	// for e.afterLoad() (the floor's steps run meanwhile). What it holds
	// then is its own: what the runtime did not give back, and the
	// connections to the provider it did not shed (a load that halved
	// closes the idle ones).
	agentdDone := time.Now()
	c.HTTP.CloseIdleConnections()
	if ctx.Err() == nil {
		fm, err := floorStep(ctx, e, round, p, p.FloorRate, false)
		for k, v := range fm {
			m["floor."+k] = v
		}
		if err != nil {
			e.Note("capacity", "%s floor: %v", runTag(round, store), err)
		}
		if ctx.Err() == nil {
			gm, err := floorStep(ctx, e, round, p, p.FloorRate, true)
			for k, v := range gm {
				m["grpc_floor."+k] = v
			}
			if err != nil {
				e.Note("capacity", "%s grpc floor: %v", runTag(round, store), err)
			}
		}
		putCPURatios(m, p.FloorRate)
	}
	if ctx.Err() == nil && p.FloorHighRate > 0 {
		fm, err := floorStep(ctx, e, round, p, p.FloorHighRate, false)
		for k, v := range fm {
			m["floor_high."+k] = v
		}
		if err != nil {
			e.Note("capacity", "%s floor at %d/s: %v", runTag(round, store), p.FloorHighRate, err)
		}
	}
	if ctx.Err() == nil && !a.Exited() {
		afterLoadRSS(ctx, e, a, m, agentdDone)
		if e.profiling(round) {
			// What agentd holds once its load has gone.
			e.HeapProfile(ctx, a, profileName(store, "capacity-after-load"))
		}
	}
	return m, nil
}

// afterLoad is how long a process idles after a load before its RSS is
// read as the load's remainder (a moment in a quick run).
func (e *Env) afterLoad() time.Duration {
	if e.Cfg.Quick {
		return 100 * time.Millisecond
	}
	return 10 * time.Second
}

// afterLoadRSS records agentd's RSS e.afterLoad() past done (its load's end),
// its peak RSS, and then (after a forced GC, once the RSS is read) its
// live heap and where the runtime's memory is. The bench's clients have
// closed their connections to agentd, and agentd has shed its idle ones
// to the mock (the floor keeps its): no session stays live. The second
// ratio holds the RSS against the idle RSS plus the live heap's growth.
func afterLoadRSS(ctx context.Context, e *Env, a *Agentd, m Metrics, done time.Time) {
	if d := time.Until(done.Add(e.afterLoad())); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
	s := a.Sample()
	m["rss.after_load_mib"], m["rss.peak_mib"] = mibOf(s.RSS), mibOf(s.HWM)
	m["rss.after_load_s"] = time.Since(done).Seconds()
	if idle := m["rss.idle_mib"]; idle > 0 {
		m["rss.after_load_ratio"] = m["rss.after_load_mib"] / idle
	}
	ms, err := a.Mem(ctx, true)
	if err != nil {
		return
	}
	m["rss.after_load_live_mib"] = mibOf(int64(ms.Live))
	m["rss.after_load_goroutines"] = float64(ms.Goroutines)
	m["rss.after_load_stacks_mib"] = mibOf(int64(ms.StackInuse))
	m["rss.after_load_heap_free_mib"] = mibOf(int64(ms.HeapIdle - ms.HeapReleased))
	m["rss.after_load_runtime_mib"] = mibOf(int64(ms.MSpanSys + ms.GCSys + ms.OtherSys))
	if idle, ok := m["rss.idle_mib"]; ok && idle > 0 {
		grown := max(m["rss.after_load_live_mib"]-m["rss.idle_live_mib"], 0)
		m["rss.after_load_live_ratio"] = m["rss.after_load_mib"] / (idle + grown)
	}
}

// mibOf is n bytes in MiB.
func mibOf(n int64) float64 { return float64(n) / (1 << 20) }

// floorStep runs rate through the bare reverse proxy, a process of its
// own, straight to the mock: the same streams, no agentd. Its CPU per
// chunk is the floor of what relaying a chunk costs on this machine.
//
// The high rate's step, whose CPU no ratio uses, is profiled in the
// profiling round (its whole run: the profiler's own cost is in it), so
// that the floor's per-chunk cost can be read beside agentd's profile of
// the same rate.
//
// With overGRPC, the floor is the gRPC one (grpcFloor: a bare grpc-go
// relay of the mock's deltas) instead, read by gRPC clients as agentd's
// are; it is profiled in the profiling round at any rate.
func floorStep(ctx context.Context, e *Env, round int, p capacityParams, rate int, overGRPC bool) (Metrics, error) {
	var profile string
	name := "floor"
	if overGRPC {
		name = "grpc-floor"
	}
	if (rate == p.FloorHighRate || overGRPC) && e.profiling(round) {
		profile = filepath.Join(e.Cfg.Out, "profiles", fmt.Sprintf("capacity-%s-%d-per-s-cpu.pprof", name, rate))
	}
	startProc := StartFloorProc
	if overGRPC {
		startProc = StartGRPCFloorProc
	}
	fp, err := startProc(e.Cfg.Bin, e.Mock.URL, profile)
	if err != nil {
		return nil, err
	}
	idleRSS := fp.Sample().RSS
	defer func() {
		fp.Stop(5 * time.Second)
		if profile == "" {
			return
		}
		if st, err := os.Stat(profile); err != nil || st.Size() == 0 {
			e.Note("profiles", "the %s's profile at %d/s was not written", name, rate)
			return
		}
		e.addProfile(profile)
	}()
	hc := NewHTTPClient()
	defer hc.CloseIdleConnections()
	var apis []agentdv1.AgentServiceClient
	if overGRPC {
		for range capacityGRPCConns {
			conn, api, err := DialGRPCFloor(fp.URL)
			if err != nil {
				return nil, err
			}
			defer conn.Close()
			apis = append(apis, api)
		}
	}
	headers := map[string]string{
		"X-Mock-Stamp": "1", "X-Mock-Tokens": strconv.Itoa(p.Tokens), "X-Mock-Chunk-Delay-Ms": strconv.Itoa(p.ChunkMs),
	}
	streamDur := p.streamDuration()
	total := int(float64(rate) * p.Step.Seconds())
	interval := time.Second / time.Duration(rate)
	var mu sync.Mutex
	turns := make([]*Turn, 0, total)
	var wg sync.WaitGroup
	t0 := time.Now().Add(20 * time.Millisecond)
	winStart, winEnd := t0.Add(p.Warm), t0.Add(p.Step)
	var s0, s1 ProcSample
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		time.Sleep(time.Until(winStart))
		s0 = fp.Sample()
		time.Sleep(time.Until(winEnd))
		s1 = fp.Sample()
	}()
	for i := range total {
		due := t0.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &Turn{Due: due.UnixNano(), Deltas: make([]Delta, 0, p.Tokens)}
			pctx, cancel := context.WithTimeout(ctx, streamDur+30*time.Second)
			text := fmt.Sprintf("floor round %d prompt %d", round, i)
			if overGRPC {
				t.Err = GRPCFloorCall(pctx, apis[i%len(apis)], text, headers, t)
			} else {
				t.Err = ProviderCall(pctx, hc, fp.URL, text, headers, t)
			}
			cancel()
			mu.Lock()
			turns = append(turns, t)
			mu.Unlock()
		}()
		if i%64 == 0 {
			e.Prog.Update("%s at %d/s: %d/%d sent", name, rate, i, total)
		}
	}
	wg.Wait()
	<-samplerDone
	var added, transit Dist
	var busy time.Duration // the streams' time in the window
	errs, chunks, requests := 0, 0, 0
	w0, w1 := winStart.UnixNano(), winEnd.UnixNano()
	for _, t := range turns {
		if t.Err != nil || len(t.Deltas) != p.Tokens {
			errs++
			continue
		}
		for _, d := range t.Deltas {
			if d.Recv >= w0 && d.Recv < w1 {
				chunks++
			}
		}
		if end := t.Deltas[len(t.Deltas)-1].Recv; end > w0 && t.Due < w1 {
			busy += time.Duration(min(end, w1) - max(t.Due, w0))
		}
		if t.Due < w0 || t.Due >= w1 {
			continue
		}
		requests++
		f := t.Deltas[0]
		added.Add(ms((f.Arrival - t.Due) + (f.Recv - f.Write)))
		for _, d := range t.Deltas {
			transit.Add(ms(d.Recv - d.Write))
		}
	}
	m := Metrics{"rate": float64(rate), "errors": float64(errs)}
	if w := winEnd.Sub(winStart); w > 0 {
		m["inflight.mean"] = busy.Seconds() / w.Seconds() // Little's law over the window
	}
	m.PutSummary("ttft_added", added.Summary())
	m.PutSummary("chunk", transit.Summary())
	m["added.p99"] = math.Max(added.Q(.99), transit.Q(.99))
	if win := s1.At.Sub(s0.At); win > 0 {
		m["cpu_pct"] = 100 * float64(s1.CPU-s0.CPU) / float64(win)
	}
	if chunks > 0 {
		m["cpu_us_per_chunk"] = float64((s1.CPU - s0.CPU).Microseconds()) / float64(chunks)
	}
	if requests > 0 {
		m["cpu_us_per_request"] = float64((s1.CPU - s0.CPU).Microseconds()) / float64(requests)
	}
	if rate == p.FloorHighRate && !overGRPC && ctx.Err() == nil {
		// The floor's RSS after its heaviest load, read as agentd's is:
		// its clients' connections closed.
		done := time.Now()
		hc.CloseIdleConnections()
		select {
		case <-time.After(e.afterLoad()):
		case <-ctx.Done():
		}
		after := fp.Sample()
		m["rss.idle_mib"], m["rss.after_load_mib"], m["rss.peak_mib"] = mibOf(idleRSS), mibOf(after.RSS), mibOf(after.HWM)
		m["rss.after_load_s"] = time.Since(done).Seconds()
		if idleRSS > 0 {
			m["rss.after_load_ratio"] = float64(after.RSS) / float64(idleRSS)
		}
	}
	return m, nil
}

// putCPURatios sets agentd's CPU against the floor's at the floor's rate:
// per chunk for the sweep's step there (when the sweep reached it), and
// per prompt and per chunk for each of the one-transport steps. A ratio is
// set only when both of its sides were measured.
func putCPURatios(m Metrics, floorRate int) {
	ratio := func(key string, x, y float64) {
		if x > 0 && y > 0 && finite(x) && finite(y) {
			m[key] = x / y
		}
	}
	floorReq, floorChunk := m["floor.cpu_us_per_request"], m["floor.cpu_us_per_chunk"]
	ratio("cpu_per_chunk_ratio_to_floor", m[fmt.Sprintf("rate.%d.cpu_us_per_chunk", floorRate)], floorChunk)
	if floorReq > 0 {
		m["cpu_us_per_request.floor"] = floorReq
	}
	for _, op := range onePathSteps {
		perPrompt, perChunk := m["only."+op.path+".cpu_us_per_prompt"], m["only."+op.path+".cpu_us_per_chunk"]
		if perPrompt > 0 {
			m["cpu_us_per_prompt."+op.path] = perPrompt
		}
		ratio("cpu_ratio_to_floor."+op.path, perPrompt, floorReq)
		ratio("cpu_per_chunk_ratio_to_floor."+op.path, perChunk, floorChunk)
	}
	// The gRPC floor against the HTTP one, and agentd's gRPC path against
	// the gRPC floor: what grpc-go costs and what agentd adds to it.
	grpcReq := m["grpc_floor.cpu_us_per_request"]
	ratio("grpc_floor.cpu_ratio_to_floor", grpcReq, floorReq)
	ratio("cpu_ratio_to_grpc_floor.grpc", m["only.grpc.cpu_us_per_prompt"], grpcReq)
}

// capacityGRPCConns is how many gRPC connections capacity's clients
// spread their streams over, agentd's and the gRPC floor's alike.
const capacityGRPCConns = 4

// capacityStep runs one rate, its prompts over the transports of mix.
func capacityStep(ctx context.Context, e *Env, a *Agentd, c *Client, round, rate int, store string, p capacityParams, mix capacityMix) (Metrics, error) {
	rd := e.redisOf(store)
	streamDur := p.streamDuration()
	poolN := int(float64(rate)*(streamDur+time.Second).Seconds()*1.5) + 16
	ids, err := c.CreateSessions(ctx, poolN, 16, &agentdv1.CreateSessionRequest{Model: "mock/claude-bench"})
	if err != nil {
		return nil, fmt.Errorf("create %d sessions: %w", poolN, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = c.DeleteSessions(dctx, ids, 16)
	}()
	free := make(chan string, poolN)
	for _, id := range ids {
		free <- id
	}
	total := int(float64(rate) * p.Step.Seconds())
	interval := time.Second / time.Duration(rate)

	type rec struct {
		t    *Turn
		grpc bool
	}
	var mu sync.Mutex
	recs := make([]rec, 0, total)
	var noSession counter
	var inflight atomic.Int64
	var wg sync.WaitGroup

	mock0, _ := mockStats(ctx, e.Mock.URL)
	t0 := time.Now().Add(20 * time.Millisecond)
	winStart, winEnd := t0.Add(p.Warm), t0.Add(p.Step)

	// The sampler: /proc at the window's edges, in-flight prompts every 50ms.
	var s0, s1, b0, b1, k0, k1, r0, r1 ProcSample
	var mach0, mach1 MachineCPU
	var inflightDist Dist
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		time.Sleep(time.Until(winStart))
		s0, b0, k0, mach0 = a.Sample(), selfSample(), e.Mock.Sample(), ReadMachineCPU()
		if rd != nil {
			r0 = rd.Sample()
		}
		// The one-transport steps are not profiled: the profiler's own
		// cost would be in their CPU per prompt.
		if e.profiling(round) && mix == mixHalf {
			defer e.CPUProfile(ctx, a, profileName(store, fmt.Sprintf("capacity-%d-per-s-cpu", rate)), winEnd.Sub(winStart))()
			// And what agentd allocated so far (since it started: the
			// steps' prompts, mostly), by allocation site.
			defer e.AllocsProfile(ctx, a, profileName(store, fmt.Sprintf("capacity-%d-per-s-allocs", rate)))
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(winEnd) {
			select {
			case <-tick.C:
				inflightDist.Add(float64(inflight.Load()))
			case <-ctx.Done():
				return
			}
		}
		s1, b1, k1, mach1 = a.Sample(), selfSample(), e.Mock.Sample(), ReadMachineCPU()
		if rd != nil {
			r1 = rd.Sample()
		}
	}()

	for i := range total {
		due := t0.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		var id string
		select {
		case id = <-free:
		default:
			noSession.inc()
			continue
		}
		wg.Add(1)
		inflight.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			t := &Turn{Due: due.UnixNano(), Deltas: make([]Delta, 0, p.Tokens)}
			pctx, cancel := context.WithTimeout(ctx, streamDur+30*time.Second)
			text := fmt.Sprintf("capacity round %d rate %d prompt %d", round, rate, i)
			grpc := mix == mixGRPC || (mix == mixHalf && i%2 == 1)
			if grpc {
				t.Err = c.PromptGRPC(pctx, id, text, t)
			} else {
				t.Err = c.PromptSSE(pctx, id, text, t)
			}
			cancel()
			free <- id
			mu.Lock()
			recs = append(recs, rec{t, grpc})
			mu.Unlock()
		}()
		if i%64 == 0 {
			e.Prog.Update("rate %d/s%s: %d/%d sent, %d in flight", rate, mix.label(), i, total, inflight.Load())
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(streamDur + 45*time.Second):
		return nil, fmt.Errorf("%d prompts still running 45s after the last was sent", inflight.Load())
	}
	<-samplerDone
	mock1, _ := mockStats(ctx, e.Mock.URL)

	m := Metrics{}
	var added, transit, ttft, addedSSE, addedGRPC, transitSSE, transitGRPC Dist
	var errs, dropped, completed, chunks, prompts int
	w0, w1 := winStart.UnixNano(), winEnd.UnixNano()
	firstErr := ""
	for _, r := range recs {
		t := r.t
		if t.Err != nil {
			errs++
			if firstErr == "" {
				firstErr = t.Err.Error()
			}
			continue
		}
		if len(t.Deltas) != p.Tokens || t.Outcome != "completed" {
			dropped++
			continue
		}
		completed++
		for _, d := range t.Deltas {
			if d.Recv >= w0 && d.Recv < w1 {
				chunks++
			}
		}
		if t.Due < w0 || t.Due >= w1 {
			continue
		}
		prompts++
		f := t.Deltas[0]
		ad := ms((f.Arrival - t.Due) + (f.Recv - f.Write))
		added.Add(ad)
		ttft.Add(ms(f.Recv - t.Due))
		at, tr := &addedSSE, &transitSSE
		if r.grpc {
			at, tr = &addedGRPC, &transitGRPC
		}
		at.Add(ad)
		for _, d := range t.Deltas {
			x := ms(d.Recv - d.Write)
			transit.Add(x)
			tr.Add(x)
		}
	}
	if firstErr != "" {
		e.Note("capacity", "%s rate %d/s: first error: %s", runTag(round, store), rate, firstErr)
	}
	m["prompts"] = float64(total)
	m["completed"] = float64(completed)
	m["errors"] = float64(errs)
	m["dropped"] = float64(dropped)
	m["no_session"] = float64(noSession.Load())
	m.PutSummary("ttft_added", added.Summary())
	m.PutSummary("ttft", ttft.Summary())
	m.PutSummary("chunk", transit.Summary())
	m["ttft_added.sse.p99"], m["ttft_added.grpc.p99"] = addedSSE.Q(.99), addedGRPC.Q(.99)
	m["chunk.sse.p99"], m["chunk.grpc.p99"] = transitSSE.Q(.99), transitGRPC.Q(.99)
	m["added.p99"] = math.Max(added.Q(.99), transit.Q(.99))
	m["inflight.mean"] = inflightDist.Mean()
	m["inflight.max"] = inflightDist.Max()
	win := s1.At.Sub(s0.At)
	if win > 0 {
		m["agentd_cpu_pct"] = 100 * float64(s1.CPU-s0.CPU) / float64(win)
		m["mock_cpu_pct"] = 100 * float64(k1.CPU-k0.CPU) / float64(win)
		m["bench_cpu_pct"] = 100 * float64(b1.CPU-b0.CPU) / float64(win)
		m["machine_busy_pct"] = busyPct(mach0, mach1)
		m["tool_cpu_pct"] = m["mock_cpu_pct"] + m["bench_cpu_pct"]
		cores := float64(runtime.NumCPU())
		redisPct := 0.0
		if rd != nil {
			redisPct = 100 * float64(r1.CPU-r0.CPU) / float64(win)
			m["redis_server_cpu_pct"] = redisPct
		}
		m["other_cpu_pct"] = max(m["machine_busy_pct"]*cores-m["agentd_cpu_pct"]-m["tool_cpu_pct"]-redisPct, 0)
		m["chunks_per_s"] = float64(chunks) / win.Seconds()
	}
	if chunks > 0 {
		m["cpu_us_per_chunk"] = float64((s1.CPU - s0.CPU).Microseconds()) / float64(chunks)
		if rd != nil && win > 0 {
			m["redis_server_cpu_us_per_chunk"] = float64((r1.CPU - r0.CPU).Microseconds()) / float64(chunks)
		}
	}
	// Per prompt: the window's CPU over the prompts completed of those due
	// in it (in a steady state, the window holds as much of the work of
	// prompts due before it as it lacks of those due near its end).
	if prompts > 0 {
		m["cpu_us_per_prompt"] = float64((s1.CPU - s0.CPU).Microseconds()) / float64(prompts)
		if rd != nil && win > 0 {
			m["redis_server_cpu_us_per_prompt"] = float64((r1.CPU - r0.CPU).Microseconds()) / float64(prompts)
		}
	}
	m["agentd_rss_mib"] = float64(s1.RSS) / (1 << 20)
	if rd != nil {
		m["redis_server_rss_mib"] = float64(r1.RSS) / (1 << 20)
	}
	if n := mock1.Requests - mock0.Requests; n > 0 {
		m["provider_conns_per_prompt"] = float64(mock1.Connections-mock0.Connections) / float64(n)
	}
	e.Prog.Update("rate %d/s%s: added p99 %.2f ms, %d errors", rate, mix.label(), m["added.p99"], errs)
	return m, nil
}

func selfSample() ProcSample {
	s, _ := ReadProc(os.Getpid())
	return s
}

func mockStats(ctx context.Context, base string) (mock.Stats, error) {
	var s mock.Stats
	err := getJSON(ctx, base+"/mock/stats", &s)
	return s, err
}
