package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

// Paths of the overhead scenario.
const (
	pathDirect = "direct" // the bench straight to the mock
	pathFloor  = "floor"  // through the bare httputil.ReverseProxy
	// through the gRPC floor: a bare grpc-go relay of the mock's deltas
	pathGRPCFloor = "grpc_floor"
	pathREST      = "rest" // through agentd, REST + SSE
	pathGRPC      = "grpc" // through agentd, gRPC
	// With a baseline (Config.Baseline): the same two through it.
	pathRESTBase = "rest_baseline"
	pathGRPCBase = "grpc_baseline"
)

var overheadPaths = []string{pathDirect, pathFloor, pathGRPCFloor, pathREST, pathGRPC}

// overheadParams: one request at a time, a short paced stream.
type overheadParams struct {
	N, Warmup, Tokens, ChunkMs int
}

func overheadParamsFor(quick bool) overheadParams {
	if quick {
		return overheadParams{N: 10, Warmup: 2, Tokens: 8, ChunkMs: 2}
	}
	return overheadParams{N: 200, Warmup: 20, Tokens: 8, ChunkMs: 2}
}

// runOverhead: one request at a time, interleaved over the five paths
// (direct, floor, gRPC floor, agentd REST+SSE, agentd gRPC), each agentd
// prompt on a fresh session so that every request carries the same
// one-message context. Every text delta is stamped by the mock, so each
// request yields its inbound time (request sent → mock got it) and each
// chunk its transit time (mock wrote it → client read it), whatever the
// path. On the Redis store, redis-server's CPU per prompt is measured too.
func runOverhead(ctx context.Context, e *Env, round int, store string) (_ Metrics, err error) {
	p := overheadParamsFor(e.Cfg.Quick)
	headers := map[string]string{
		"X-Mock-Stamp": "1", "X-Mock-Tokens": strconv.Itoa(p.Tokens), "X-Mock-Chunk-Delay-Ms": strconv.Itoa(p.ChunkMs),
	}
	cfg := "providers:\n" + e.MockProvider("mock", "anthropic", headers)
	bin, baseBin := e.Cfg.Bin, e.Cfg.Baseline
	if baseBin != "" {
		// Fresh copies of both binaries each round: a binary's code keeps
		// the physical pages the page cache gave it, and those moved one
		// binary against a copy of itself by 7 % for a whole run (the
		// caches are physically indexed). New pages each round turn that
		// into a spread over the rounds.
		if bin, err = freshCopy(bin, e.Dir, fmt.Sprintf("agentd-%d-%s", round, store)); err != nil {
			return nil, err
		}
		defer os.Remove(bin) // after the processes stop: deferred first
		if baseBin, err = freshCopy(baseBin, e.Dir, fmt.Sprintf("baseline-%d-%s", round, store)); err != nil {
			return nil, err
		}
		defer os.Remove(baseBin)
	}
	a, err := e.startAgentdOn(bin, store, "overhead", round, cfg)
	if err != nil {
		return nil, err
	}
	defer a.Stop(10 * time.Second)
	c, err := NewClient(a, 1)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// The floor is a process of its own, as agentd and the mock are: a
	// proxy inside the bench's process would skip the wake-up of an idle
	// process that every other hop pays.
	fp, err := StartFloorProc(e.Cfg.Bin, e.Mock.URL, "")
	if err != nil {
		return nil, fmt.Errorf("floor proxy: %w", err)
	}
	defer fp.Stop(5 * time.Second)
	gf, err := StartGRPCFloorProc(e.Cfg.Bin, e.Mock.URL, "")
	if err != nil {
		return nil, fmt.Errorf("grpc floor: %w", err)
	}
	defer gf.Stop(5 * time.Second)
	gfConn, gfAPI, err := DialGRPCFloor(gf.URL)
	if err != nil {
		return nil, fmt.Errorf("grpc floor: %w", err)
	}
	defer gfConn.Close()
	total := p.Warmup + p.N
	ids, err := c.CreateSessions(ctx, 2*total, 8, &agentdv1.CreateSessionRequest{Model: "mock/claude-bench"})
	if err != nil {
		return nil, fmt.Errorf("create sessions: %w", err)
	}
	paths := overheadPaths
	var base *Agentd
	var cb *Client
	var baseIDs []string
	if baseBin != "" {
		paths = append(slices.Clone(overheadPaths), pathRESTBase, pathGRPCBase)
		if base, err = e.startAgentdOn(baseBin, store, "overhead-baseline", round, cfg); err != nil {
			return nil, fmt.Errorf("the baseline: %w", err)
		}
		defer base.Stop(10 * time.Second)
		if cb, err = NewClient(base, 1); err != nil {
			return nil, err
		}
		defer cb.Close()
		if baseIDs, err = cb.CreateSessions(ctx, 2*total, 8, &agentdv1.CreateSessionRequest{Model: "mock/claude-bench"}); err != nil {
			return nil, fmt.Errorf("the baseline: create sessions: %w", err)
		}
	}
	hc := NewHTTPClient()
	defer hc.CloseIdleConnections()

	turns := map[string][]*Turn{}
	errs := map[string]int{}
	rd := e.redisOf(store)
	var rd0, rd1 ProcSample
	if rd != nil {
		rd0 = rd.Sample()
	}
	cpu0 := a.Sample()
	var base0, base1 ProcSample
	if base != nil {
		base0 = base.Sample()
	}
	mach0 := ReadMachineCPU()
	var stopProfile func()
	order := slices.Clone(paths)
	shuffle := rand.New(rand.NewPCG(uint64(round), 0))
	for i := range total {
		if i == p.Warmup && e.profiling(round) {
			// The agentd requests take about half of the remaining time.
			d := time.Duration(p.N*len(paths)*(p.Tokens+6)*p.ChunkMs) * time.Millisecond
			stopProfile = e.CPUProfile(ctx, a, profileName(store, "overhead-cpu"), d)
		}
		if base != nil {
			// A random order: with two agentds, a fixed rotation would
			// always run one's path right after the other's.
			shuffle.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		} else {
			for k := range paths {
				order[k] = paths[(i+k)%len(paths)]
			}
		}
		for _, path := range order {
			t := &Turn{}
			text := fmt.Sprintf("overhead round %d request %d via %s", round, i, path)
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var err error
			switch path {
			case pathDirect:
				err = ProviderCall(rctx, hc, e.Mock.URL, text, headers, t)
			case pathFloor:
				err = ProviderCall(rctx, hc, fp.URL, text, headers, t)
			case pathGRPCFloor:
				err = GRPCFloorCall(rctx, gfAPI, text, headers, t)
			case pathREST:
				err = c.PromptSSE(rctx, ids[2*i], text, t)
			case pathGRPC:
				err = c.PromptGRPC(rctx, ids[2*i+1], text, t)
			case pathRESTBase:
				err = cb.PromptSSE(rctx, baseIDs[2*i], text, t)
			case pathGRPCBase:
				err = cb.PromptGRPC(rctx, baseIDs[2*i+1], text, t)
			}
			cancel()
			if err == nil && (len(t.Deltas) != p.Tokens || t.Outcome != "completed") {
				err = fmt.Errorf("%d deltas, outcome %q", len(t.Deltas), t.Outcome)
			}
			if err != nil {
				errs[path]++
				if errs[path] <= 3 {
					why := ""
					switch path {
					case pathFloor: // what the proxy saw (its last line)
						why = lastLine(fp.Tail())
					case pathGRPCFloor:
						why = lastLine(gf.Tail())
					}
					e.Note("overhead", "%s %s: %v%s", runTag(round, store), path, err, why)
				}
				continue
			}
			if i >= p.Warmup {
				turns[path] = append(turns[path], t)
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e.Prog.Update("%d/%d requests per path", i+1, total)
	}
	cpu1 := a.Sample()
	if base != nil {
		base1 = base.Sample()
	}
	mach1 := ReadMachineCPU()
	if rd != nil {
		rd1 = rd.Sample()
	}
	if stopProfile != nil {
		stopProfile()
	}

	m := Metrics{}
	type dists struct{ ttft, inbound, firstTransit, overhead, transit, gap, end Dist }
	d := map[string]*dists{}
	for _, path := range paths {
		x := &dists{}
		d[path] = x
		for _, t := range turns[path] {
			f := t.Deltas[0]
			x.ttft.Add(ms(f.Recv - t.Sent))
			x.inbound.Add(ms(f.Arrival - t.Sent))
			x.firstTransit.Add(ms(f.Recv - f.Write))
			// Everything but the mock's own time to the first delta.
			x.overhead.Add(ms((f.Arrival - t.Sent) + (f.Recv - f.Write)))
			x.end.Add(ms(t.End - t.Sent))
			for j, dl := range t.Deltas {
				x.transit.Add(ms(dl.Recv - dl.Write))
				if j > 0 {
					x.gap.Add(ms(dl.Recv - t.Deltas[j-1].Recv))
				}
			}
		}
		m.PutSummary("ttft."+path, x.ttft.Summary())
		m.PutSummary("inbound."+path, x.inbound.Summary())
		m.PutSummary("overhead."+path, x.overhead.Summary())
		m.PutSummary("transit."+path, x.transit.Summary())
		m.PutSummary("gap."+path, x.gap.Summary())
		m.PutSummary("end."+path, x.end.Summary())
		m["errors."+path] = float64(errs[path])
	}
	// Added: the path's percentile less the direct path's median, so that
	// the direct path's own outliers (the machine is shared) never make an
	// added p99 look smaller than it is.
	dir := d[pathDirect]
	for _, path := range paths[1:] {
		x := d[path]
		for _, q := range []struct {
			name string
			q    float64
		}{{"p50", .5}, {"p99", .99}} {
			m["added_ttft."+path+"."+q.name] = x.overhead.Q(q.q) - dir.overhead.Q(.5)
			m["added_ttft_raw."+path+"."+q.name] = x.ttft.Q(q.q) - dir.ttft.Q(.5)
			m["added_chunk."+path+"."+q.name] = x.transit.Q(q.q) - dir.transit.Q(.5)
			m["added_end."+path+"."+q.name] = x.end.Q(q.q) - dir.end.Q(.5)
		}
	}
	if fl := m["added_ttft.floor.p50"]; fl > 0 {
		m["ratio_to_floor.rest.p50"] = m["added_ttft.rest.p50"] / fl
		m["ratio_to_floor.grpc.p50"] = m["added_ttft.grpc.p50"] / fl
		m["ratio_to_floor.grpc_floor.p50"] = m["added_ttft.grpc_floor.p50"] / fl
	}
	if gfl := m["added_ttft.grpc_floor.p50"]; gfl > 0 {
		m["ratio_to_grpc_floor.grpc.p50"] = m["added_ttft.grpc.p50"] / gfl
	}
	prompts := len(turns[pathREST]) + len(turns[pathGRPC]) + errs[pathREST] + errs[pathGRPC] + 2*p.Warmup
	if prompts > 0 {
		m["cpu_us_per_prompt"] = float64((cpu1.CPU - cpu0.CPU).Microseconds()) / float64(prompts)
		m["cpu_us_per_chunk_c1"] = m["cpu_us_per_prompt"] / float64(p.Tokens)
		if rd != nil {
			m["redis_server_cpu_us_per_prompt"] = float64((rd1.CPU - rd0.CPU).Microseconds()) / float64(prompts)
		}
	}
	if base != nil {
		for _, x := range []struct{ path, base string }{{pathREST, pathRESTBase}, {pathGRPC, pathGRPCBase}} {
			if b := m["added_ttft."+x.base+".p50"]; b > 0 {
				m["ratio_to_baseline."+x.path+".p50"] = m["added_ttft."+x.path+".p50"] / b
			}
			if b := m["added_chunk."+x.base+".p50"]; b > 0 {
				m["ratio_to_baseline.chunk."+x.path+".p50"] = m["added_chunk."+x.path+".p50"] / b
			}
		}
		bp := len(turns[pathRESTBase]) + len(turns[pathGRPCBase]) + errs[pathRESTBase] + errs[pathGRPCBase] + 2*p.Warmup
		if bp > 0 {
			m["baseline.cpu_us_per_prompt"] = float64((base1.CPU - base0.CPU).Microseconds()) / float64(bp)
			if m["baseline.cpu_us_per_prompt"] > 0 {
				m["ratio_to_baseline.cpu_per_prompt"] = m["cpu_us_per_prompt"] / m["baseline.cpu_us_per_prompt"]
			}
		}
	}
	m["machine_busy_pct"] = busyPct(mach0, mach1)
	m["agentd_rss_mib"] = float64(cpu1.RSS) / (1 << 20)
	if rd != nil {
		m["redis_server_rss_mib"] = float64(rd1.RSS) / (1 << 20)
	}
	return m, nil
}

func busyPct(a, b MachineCPU) float64 {
	if b.Total <= a.Total {
		return 0
	}
	return 100 * float64(b.Busy-a.Busy) / float64(b.Total-a.Total)
}

// freshCopy copies the executable bin to a new file name in dir.
func freshCopy(bin, dir, name string) (string, error) {
	src, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer src.Close()
	path := filepath.Join(dir, name)
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		return "", err
	}
	return path, dst.Close()
}

// lastLine is the last line of a process's output, as a note's suffix
// ("" when there is none).
func lastLine(tail string) string {
	tail = strings.TrimSpace(tail)
	if tail == "" {
		return ""
	}
	if i := strings.LastIndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	return " (" + tail + ")"
}
