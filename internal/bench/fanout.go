package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

type fanoutParams struct {
	Levels  []int // subscribers (half SSE, half gRPC)
	Control int   // the level also run without the stalled subscriber
	Prompts int   // measured prompts per level
	Tokens  int
	ChunkMs int
	Preload int // deltas of the unpaced prompt that fills the stalled subscriber's pipe
}

func fanoutParamsFor(quick bool) fanoutParams {
	if quick {
		return fanoutParams{Levels: []int{1, 10}, Control: 10, Prompts: 1, Tokens: 5, ChunkMs: 10, Preload: 300}
	}
	return fanoutParams{Levels: []int{1, 10, 100, 1000}, Control: 100, Prompts: 3, Tokens: 40, ChunkMs: 50, Preload: 3000}
}

// runFanout: one session, N subscribers following its events (half over
// SSE, half over gRPC StreamEvents), plus one stalled SSE subscriber: a
// connection with a small receive buffer that reads nothing, subscribed
// from the session's first event after an unpaced preload prompt of a few
// thousand deltas, so that agentd's writes to it block before the measured
// prompts start. The measured prompts are started without a streaming
// reader (REST, Accept: application/json) and paced. Per chunk, the
// last-subscriber latency is the latest of the N subscribers' reads minus
// the mock's write. The control level runs again without the stalled
// subscriber: the stalled one must add nothing. On the Redis store,
// redis-server's CPU over the measured prompts is measured too.
func runFanout(ctx context.Context, e *Env, round int, store string) (Metrics, error) {
	p := fanoutParamsFor(e.Cfg.Quick)
	headers := map[string]string{"X-Mock-Stamp": "1", "X-Mock-Chunk-Delay-Ms": strconv.Itoa(p.ChunkMs)}
	a, err := e.StartAgentdOn(store, "fanout", round, "providers:\n"+e.MockProvider("mock", "anthropic", headers))
	if err != nil {
		return nil, err
	}
	defer a.Stop(15 * time.Second)
	c, err := NewClient(a, 8)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	m := Metrics{}
	type run struct {
		n       int
		stalled bool
	}
	var runs []run
	for _, n := range p.Levels {
		runs = append(runs, run{n, true})
		if n == p.Control {
			runs = append(runs, run{n, false})
		}
	}
	for _, r := range runs {
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		name := fmt.Sprintf("n%d", r.n)
		if !r.stalled {
			name += ".nostall"
		}
		rm, err := fanoutRun(ctx, e, a, c, round, store, r.n, r.stalled, p, name)
		for k, v := range rm {
			m[name+"."+k] = v
		}
		if err != nil {
			e.Note("fanout", "%s %s: %v", runTag(round, store), name, err)
		}
	}
	if v, w := m[fmt.Sprintf("n%d.last.p99", p.Control)], m[fmt.Sprintf("n%d.nostall.last.p99", p.Control)]; w > 0 {
		m["stall_effect.p99_ms"] = v - w
	}
	return m, nil
}

func fanoutRun(ctx context.Context, e *Env, a *Agentd, c *Client, round int, store string, n int, stalled bool, p fanoutParams, name string) (Metrics, error) {
	m := Metrics{}
	id, err := c.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "mock/claude-bench"})
	if err != nil {
		return m, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = c.DeleteSessions(dctx, []string{id}, 1)
		cancel()
	}()
	// The preload: an unpaced prompt of many deltas.
	pre := &Turn{}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.PromptGRPC(pctx, id, fmt.Sprintf("preload %s round %d [[tokens: %d]] [[pace: chunk=0]]", name, round, p.Preload), pre)
	cancel()
	if err != nil {
		return m, fmt.Errorf("preload: %w", err)
	}
	st, err := c.API().GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil {
		return m, err
	}
	after := st.GetLastSeq()

	var stall *IdleSubscriber
	var stallPort int
	if stalled {
		stall, err = OpenIdleSSE(ctx, a.HTTP, id, nil, 4096)
		if err != nil {
			return m, fmt.Errorf("stalled subscriber: %w", err)
		}
		defer stall.Close()
		stallPort = stall.conn.LocalAddr().(*net.TCPAddr).Port
	}

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	subs := make([]*Turn, n)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var subErrs []string
	for i := range n {
		subs[i] = &Turn{Deltas: make([]Delta, 0, p.Prompts*p.Tokens)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%2 == 0 {
				err = c.FollowSSE(sctx, id, after, subs[i])
			} else {
				err = c.FollowGRPC(sctx, id, after, subs[i])
			}
			if err != nil && sctx.Err() == nil {
				errMu.Lock()
				subErrs = append(subErrs, err.Error())
				errMu.Unlock()
			}
		}()
	}
	want := n
	if stalled {
		want++
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, err := a.Gauge(ctx, "agentd_event_subscribers")
		if err == nil && int(v) >= want {
			break
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("agentd counts %v subscribers of %d after 60s (%v)", v, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if stalled {
		m["stalled_backlog_kib"] = float64(tcpBacklog(stallPort)) / 1024
	}

	rd := e.redisOf(store)
	var rd0, rd1 ProcSample
	if rd != nil {
		rd0 = rd.Sample()
	}
	cpu0 := a.Sample()
	var stopProfile func()
	if e.profiling(round) && n >= 100 && stalled {
		d := time.Duration(p.Prompts*(p.Tokens+5)*p.ChunkMs) * time.Millisecond
		stopProfile = e.CPUProfile(ctx, a, profileName(store, fmt.Sprintf("fanout-%d-cpu", n)), d)
	}
	// The measured prompts, one after the other: started over REST without
	// a reader of their own; every subscriber must see each prompt_end.
	for k := range p.Prompts {
		text := fmt.Sprintf("fanout %s round %d prompt %d [[tokens: %d]]", name, round, k, p.Tokens)
		if err := c.StartPrompt(ctx, id, text); err != nil {
			return m, fmt.Errorf("prompt %d: %w", k, err)
		}
		wantEnds := k + 1
		deadline := time.Now().Add(time.Duration(p.Tokens+5)*time.Duration(p.ChunkMs)*time.Millisecond + 30*time.Second)
		for {
			done := 0
			for _, s := range subs {
				if promptEnds(s) >= wantEnds {
					done++
				}
			}
			if done == n {
				break
			}
			if time.Now().After(deadline) {
				return m, fmt.Errorf("prompt %d: %d of %d subscribers saw its end after the deadline", k, done, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		e.Prog.Update("%s: prompt %d/%d done", name, k+1, p.Prompts)
	}
	cpu1 := a.Sample()
	if rd != nil {
		rd1 = rd.Sample()
	}
	if stopProfile != nil {
		stopProfile()
	}
	if stalled {
		m["stalled_backlog_end_kib"] = float64(tcpBacklog(stallPort)) / 1024
	}
	stop()
	wg.Wait()

	// Per chunk: the latest read over every subscriber.
	chunks := p.Prompts * p.Tokens
	var last, all Dist
	dropped := 0
	lastRecv := make([]int64, chunks)
	write := make([]int64, chunks)
	for _, s := range subs {
		if len(s.Deltas) != chunks {
			dropped++
			continue
		}
		for i, d := range s.Deltas {
			lastRecv[i] = max(lastRecv[i], d.Recv)
			write[i] = d.Write
			all.Add(ms(d.Recv - d.Write))
		}
	}
	for i := range chunks {
		if lastRecv[i] > 0 {
			last.Add(ms(lastRecv[i] - write[i]))
		}
	}
	m.PutSummary("last", last.Summary())
	m.PutSummary("each", all.Summary())
	m["subscribers_short"] = float64(dropped)
	m["subscriber_errors"] = float64(len(subErrs))
	if len(subErrs) > 0 {
		e.Note("fanout", "%s %s: %d subscriber errors, first: %s", runTag(round, store), name, len(subErrs), subErrs[0])
	}
	if delivered := float64(chunks * (n - dropped)); delivered > 0 {
		m["cpu_us_per_chunk_per_sub"] = float64((cpu1.CPU - cpu0.CPU).Microseconds()) / delivered
		if rd != nil {
			m["redis_server_cpu_us_per_chunk_per_sub"] = float64((rd1.CPU - rd0.CPU).Microseconds()) / delivered
		}
	}
	m["agentd_cpu_s"] = (cpu1.CPU - cpu0.CPU).Seconds()
	if rd != nil {
		m["redis_server_cpu_s"] = (rd1.CPU - rd0.CPU).Seconds()
	}
	return m, nil
}

// promptEnds is how many prompt_end events a subscriber has seen.
func promptEnds(t *Turn) int { return int(t.ends.Load()) }

// tcpBacklog sums the send and receive queues of the loopback connection
// whose one end is port: the bytes agentd could not deliver to a stalled
// reader.
func tcpBacklog(port int) int64 {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	hexPort := strings.ToUpper(fmt.Sprintf("%04x", port))
	var total int64
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		local, remote := f[1], f[2]
		if !strings.HasSuffix(local, ":"+hexPort) && !strings.HasSuffix(remote, ":"+hexPort) {
			continue
		}
		tx, rx, ok := strings.Cut(f[4], ":")
		if !ok {
			continue
		}
		for _, q := range []string{tx, rx} {
			if v, err := strconv.ParseInt(q, 16, 64); err == nil {
				total += v
			}
		}
	}
	return total
}
