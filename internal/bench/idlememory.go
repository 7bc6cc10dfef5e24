package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

type idleParams struct {
	Levels      []int // idle sessions, cumulative
	Subscribers int   // idle SSE subscribers (one per session), at the first level
}

func idleParamsFor(quick bool) idleParams {
	if quick {
		return idleParams{Levels: []int{100, 200}, Subscribers: 100}
	}
	return idleParams{Levels: []int{10000, 100000}, Subscribers: 10000}
}

// runIdleMemory: sessions on the default configuration (the simulated
// provider, so that building history costs no network), each created bare
// and measured, then given one prompt (a history of two messages) and
// measured again; then one idle SSE subscriber per session on the first
// level's sessions; then everything is let go. Heap figures are Go's
// HeapAlloc + StackInuse after a forced GC (the debug listener), RSS is
// /proc's VmRSS. On the Redis store, redis-server's used_memory (INFO
// memory) is measured at the same points.
func runIdleMemory(ctx context.Context, e *Env, round int, store string) (Metrics, error) {
	p := idleParamsFor(e.Cfg.Quick)
	tag := runTag(round, store)
	rd := e.redisOf(store)
	a, err := e.StartAgentdOn(store, "idle-memory", round, "")
	if err != nil {
		return nil, err
	}
	defer a.Stop(30 * time.Second)
	c, err := NewClient(a, 4)
	if err != nil {
		return nil, err
	}
	defer c.Close()

	m := Metrics{}
	measure := func(gc bool) (MemStats, ProcSample, error) {
		ms, err := a.Mem(ctx, gc)
		return ms, a.Sample(), a.Explain(err)
	}
	base, baseP, err := measure(true)
	if err != nil {
		return nil, fmt.Errorf("debug listener: %w", err)
	}
	m["base.live_mib"] = float64(base.Live) / (1 << 20)
	m["base.rss_mib"] = float64(baseP.RSS) / (1 << 20)
	// redisUsed is redis-server's used_memory (0 on the memory store).
	redisUsed := func() (int64, error) {
		if rd == nil {
			return 0, nil
		}
		return rd.UsedMemory()
	}
	baseRedis, err := redisUsed()
	if err != nil {
		return m, err
	}
	if rd != nil {
		m["base.redis_server_used_mib"] = float64(baseRedis) / (1 << 20)
	}
	prevRedis := baseRedis

	var ids []string
	var withHistory ProcSample
	var withHistoryMem MemStats
	for li, level := range p.Levels {
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
		prevLive, prevRSS := base.Live, baseP.RSS
		if li > 0 {
			prevLive, prevRSS = withHistoryMem.Live, withHistory.RSS
		}
		n := level - len(ids)
		// Bare sessions, in batches, watching the RSS budget.
		created, err := createWithin(ctx, e, a, rd, c, n, "sessions")
		ids = append(ids, created...)
		if err != nil {
			e.Note("idle-memory", "%s: stopped at %d sessions: %v", tag, len(ids), err)
			m[fmt.Sprintf("stopped_at.%d", level)] = float64(len(ids))
			break
		}
		bare, bareP, err := measure(true)
		if err != nil {
			return m, err
		}
		lv := fmt.Sprint(level)
		m["bare."+lv+".heap_per_session_b"] = float64(int64(bare.Live)-int64(prevLive)) / float64(n)
		m["bare."+lv+".rss_per_session_b"] = float64(bareP.RSS-prevRSS) / float64(n)
		bareRedis, err := redisUsed()
		if err != nil {
			return m, err
		}
		if rd != nil {
			m["bare."+lv+".redis_server_mem_per_session_b"] = float64(bareRedis-prevRedis) / float64(n)
		}
		// One prompt each: the user's text and the echo, ~11 and ~17 bytes of text.
		e.Prog.Update("%d sessions: prompting", level)
		if err := promptAll(ctx, e, a, c, created); err != nil {
			e.Note("idle-memory", "%s: prompting: %v", tag, err)
			break
		}
		withHistoryMem, withHistory, err = measure(true)
		if err != nil {
			return m, err
		}
		m[lv+".heap_per_session_b"] = float64(int64(withHistoryMem.Live)-int64(prevLive)) / float64(n)
		m[lv+".rss_per_session_b"] = float64(withHistory.RSS-prevRSS) / float64(n)
		m[lv+".history_per_session_b"] = float64(int64(withHistoryMem.Live)-int64(bare.Live)) / float64(n)
		m[lv+".total_live_mib"] = float64(withHistoryMem.Live) / (1 << 20)
		m[lv+".heap_sys_mib"] = float64(withHistoryMem.HeapSys) / (1 << 20)
		m[lv+".total_rss_mib"] = float64(withHistory.RSS) / (1 << 20)
		m[lv+".pte_mib"] = float64(withHistory.PTE) / (1 << 20)
		m[lv+".goroutines"] = float64(withHistoryMem.Goroutines)
		m["sessions"] = float64(len(ids))
		if rd != nil {
			used, err := redisUsed()
			if err != nil {
				return m, err
			}
			m[lv+".redis_server_mem_per_session_b"] = float64(used-prevRedis) / float64(n)
			m[lv+".redis_server_history_per_session_b"] = float64(used-bareRedis) / float64(n)
			m[lv+".redis_server_used_mib"] = float64(used) / (1 << 20)
			m[lv+".redis_server_rss_mib"] = float64(rd.Sample().RSS) / (1 << 20)
			prevRedis = used
		}
		if li == 0 && e.profiling(round) {
			e.HeapProfile(ctx, a, profileName(store, fmt.Sprintf("idle-memory-%d-sessions", level)))
		}
		if li == 0 {
			// Subscribers go on the first level's sessions.
			if err := idleSubscribers(ctx, e, a, c, ids, p, m, round, store); err != nil {
				e.Note("idle-memory", "%s: subscribers: %v", tag, err)
			}
			// The subscribers' bookkeeping shifts the baseline of the next
			// level: measure again.
			withHistoryMem, withHistory, err = measure(true)
			if err != nil {
				return m, err
			}
		}
	}
	// The load ends: delete every session.
	e.Prog.Update("deleting %d sessions", len(ids))
	t0 := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err = c.DeleteSessions(dctx, ids, 16)
	cancel()
	if err != nil {
		e.Note("idle-memory", "%s: delete: %v", tag, err)
	}
	m["delete_s"] = time.Since(t0).Seconds()
	settle := 2 * time.Second
	if e.Cfg.Quick {
		settle = 100 * time.Millisecond
	}
	time.Sleep(settle)
	endNoGC := a.Sample()
	if !e.Cfg.Quick {
		time.Sleep(8 * time.Second)
	}
	m["after_10s.rss_mib"] = float64(a.Sample().RSS) / (1 << 20)
	endMem, endP, err := measure(true)
	if err == nil {
		m["after.live_mib"] = float64(endMem.Live) / (1 << 20)
		mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
		m["after.heap_unused_mib"] = mib(endMem.HeapInuse - endMem.HeapAlloc)
		m["after.heap_free_mib"] = mib(endMem.HeapIdle - endMem.HeapReleased)
		m["after.stack_sys_mib"] = mib(endMem.StackSys)
		m["after.mspan_sys_mib"] = mib(endMem.MSpanSys)
		m["after.gc_sys_mib"] = mib(endMem.GCSys)
		m["after.other_sys_mib"] = mib(endMem.OtherSys)
		m["after.sys_mib"] = mib(endMem.Sys - endMem.HeapReleased)
		m["after.rss_mib"] = float64(endNoGC.RSS) / (1 << 20)
		m["after_gc.rss_mib"] = float64(endP.RSS) / (1 << 20)
		m["peak.rss_mib"] = float64(endP.HWM) / (1 << 20)
	}
	if e.profiling(round) {
		// What agentd still holds once every session is gone.
		e.HeapProfile(ctx, a, profileName(store, "idle-memory-after-delete"))
	}
	if rd != nil {
		if used, err := redisUsed(); err == nil {
			m["after.redis_server_used_mib"] = float64(used) / (1 << 20)
		}
		m["peak.redis_server_rss_mib"] = float64(rd.Sample().HWM) / (1 << 20)
	}
	return m, nil
}

// createWithin creates n sessions in batches and stops when agentd's RSS,
// or rd's (the Redis store's redis-server, when not nil), passes the
// budget.
func createWithin(ctx context.Context, e *Env, a *Agentd, rd *Redis, c *Client, n int, what string) ([]string, error) {
	var ids []string
	const batch = 5000
	for len(ids) < n {
		k := min(batch, n-len(ids))
		got, err := c.CreateSessions(ctx, k, 16, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
		if err != nil {
			return ids, err
		}
		ids = append(ids, got...)
		s := a.Sample()
		e.Prog.Update("%d/%d %s, agentd RSS %.0f MiB", len(ids), n, what, float64(s.RSS)/(1<<20))
		if s.RSS > e.Cfg.MemBudget {
			return ids, fmt.Errorf("agentd RSS %.1f GiB passed the budget (--mem-budget-gib)", gib(float64(s.RSS)))
		}
		if rd != nil {
			if r := rd.Sample().RSS; r > e.Cfg.MemBudget {
				return ids, fmt.Errorf("redis-server RSS %.1f GiB passed the budget (--mem-budget-gib)", gib(float64(r)))
			}
		}
	}
	return ids, nil
}

// promptAll gives each session one short prompt over gRPC.
func promptAll(ctx context.Context, e *Env, a *Agentd, c *Client, ids []string) error {
	var done counter
	return parallel(ctx, len(ids), 16, func(i int) error {
		t := &Turn{}
		if err := c.PromptGRPC(ctx, ids[i], "hello there", t); err != nil {
			return err
		}
		if t.Outcome != "completed" {
			return fmt.Errorf("prompt %s: %s", ids[i], t.Outcome)
		}
		if n := done.Add(1); n%2000 == 0 {
			e.Prog.Update("%d/%d prompted, agentd RSS %.0f MiB", n, len(ids), float64(a.Sample().RSS)/(1<<20))
		}
		return nil
	})
}

// idleSubscribers opens one idle SSE subscriber on each of the first
// p.Subscribers sessions (as many as file descriptors allow), measures,
// closes them and measures again.
func idleSubscribers(ctx context.Context, e *Env, a *Agentd, c *Client, ids []string, p idleParams, m Metrics, round int, store string) error {
	settle := 2 * time.Second
	if e.Cfg.Quick {
		settle = 100 * time.Millisecond
	}
	n := min(p.Subscribers, len(ids))
	// Each subscriber is a descriptor here and one in agentd: keep a margin.
	if lim := NoFileLimit(); len(p.Levels) > 1 && lim > 0 && p.Levels[len(p.Levels)-1] > lim-2000 {
		e.Note("idle-memory", "subscribers measured at %d sessions only: one per session at %d sessions needs more than RLIMIT_NOFILE %d descriptors in agentd and in the load generator",
			p.Levels[0], p.Levels[len(p.Levels)-1], lim)
	}
	if lim := NoFileLimit(); lim > 0 && n > lim-2000 {
		e.Note("idle-memory", "subscribers capped at %d by RLIMIT_NOFILE %d", lim-2000, lim)
		n = lim - 2000
	}
	before, err := a.Mem(ctx, true)
	if err != nil {
		return err
	}
	beforeP := a.Sample()
	subs := make([]*IdleSubscriber, n)
	var mu sync.Mutex
	opened := 0
	err = parallel(ctx, n, 64, func(i int) error {
		s, err := OpenIdleSSE(ctx, a.HTTP, ids[i], loopbackIP(i), 0)
		if err != nil {
			return err
		}
		subs[i] = s
		mu.Lock()
		opened++
		if opened%1000 == 0 {
			e.Prog.Update("%d/%d idle SSE subscribers", opened, n)
		}
		mu.Unlock()
		return nil
	})
	defer func() {
		for _, s := range subs {
			if s != nil {
				s.Close()
			}
		}
	}()
	if err != nil {
		return err
	}
	// Wait until agentd counts them all.
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, err := a.Gauge(ctx, "agentd_event_subscribers")
		if err == nil && int(v) >= n {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agentd counts %v subscribers of %d after 60s (%v)", v, n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	after, err := a.Mem(ctx, true)
	if err != nil {
		return err
	}
	afterP := a.Sample()
	m["subscribers"] = float64(n)
	m["subscriber.heap_b"] = float64(int64(after.Live)-int64(before.Live)) / float64(n)
	m["subscriber.rss_b"] = float64(afterP.RSS-beforeP.RSS) / float64(n)
	m["subscriber.goroutines"] = float64(after.Goroutines-before.Goroutines) / float64(n)
	m["subscriber.stack_b"] = float64(int64(after.StackInuse)-int64(before.StackInuse)) / float64(n)
	if e.profiling(round) {
		e.HeapProfile(ctx, a, profileName(store, fmt.Sprintf("idle-memory-%d-subscribers", n)))
	}
	for i, s := range subs {
		s.Close()
		subs[i] = nil
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		v, err := a.Gauge(ctx, "agentd_event_subscribers")
		if err == nil && v == 0 {
			break
		}
		if time.Now().After(deadline) {
			e.Note("idle-memory", "%s: %v subscribers still counted 60s after closing", runTag(round, store), v)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(settle / 2)
	gone := a.Sample()
	m["subscribers_gone.rss_mib"] = float64(gone.RSS) / (1 << 20)
	return nil
}
