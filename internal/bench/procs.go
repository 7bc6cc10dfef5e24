package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DebugEnv is the environment variable that makes `agentd serve` listen for
// the bench's debug requests (pprof profiles, heap statistics) on a loopback
// address; see ServeDebug.
const DebugEnv = "AGENTD_BENCH_DEBUG_ADDR"

// Proc is a child process of the bench: agentd, the mock provider or
// redis-server.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	log  *lineLog
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Sample reads the process's /proc entries.
func (p *Proc) Sample() ProcSample {
	s, _ := ReadProc(p.PID())
	return s
}

// Stop ends the process: SIGTERM, then SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Tail is the end of the process's output.
func (p *Proc) Tail() string { return p.log.tail() }

// lineLog keeps the last lines of a process's output and counts lines.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	n     atomic.Int64
}

func (l *lineLog) add(s string) {
	l.n.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) >= 40 {
		l.lines = l.lines[1:]
	}
	l.lines = append(l.lines, s)
}

func (l *lineLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// start runs cmd, hands each output line to watch (until it returns true)
// and keeps the last lines; it waits until ready is closed or timeout.
func start(name string, cmd *exec.Cmd, timeout time.Duration, watch func(line string) bool) (*Proc, error) {
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{}), log: &lineLog{}}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		watching := true
		for sc.Scan() {
			line := sc.Text()
			p.log.add(line)
			if watching && watch(line) {
				watching = false
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(p.done)
	}()
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited during start-up:\n%s", name, p.Tail())
	case <-time.After(timeout):
		p.Stop(time.Second)
		return nil, fmt.Errorf("%s not ready after %s:\n%s", name, timeout, p.Tail())
	}
}

// Agentd is a running `agentd serve`.
type Agentd struct {
	*Proc
	GRPC, HTTP string // host:port
	Debug      string // host:port of the debug listener
	Dir        string
}

// benchLimits raise the per-tenant limits above what the scenarios ask of
// one tenant (idle-memory's 100k sessions, capacity's ~1000 concurrent
// streams): they measure agentd, not its quotas.
const benchLimits = "limits: {max_sessions_per_tenant: 10000000, max_concurrent_prompts_per_tenant: 1000000, max_streams_per_tenant: 1000000}\n"

// StartAgentd writes cfg (YAML without listen: nor limits:) to dir and runs
// `bin serve` on free loopback ports.
func StartAgentd(bin, dir, cfg string, env []string) (*Agentd, error) {
	path := filepath.Join(dir, "agentd.yaml")
	full := "listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n" + benchLimits + cfg
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--config", path, "--log-format", "json")
	cmd.Env = append(append(os.Environ(), DebugEnv+"=127.0.0.1:0"), env...)
	a := &Agentd{Dir: dir}
	var mu sync.Mutex
	p, err := start("agentd", cmd, 30*time.Second, func(line string) bool {
		var l struct{ Msg, GRPC, HTTP, Addr string }
		if json.Unmarshal([]byte(line), &l) != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch l.Msg {
		case "agentd serving":
			a.GRPC, a.HTTP = l.GRPC, l.HTTP
		case debugMsg:
			a.Debug = l.Addr
		}
		return a.GRPC != "" && a.Debug != ""
	})
	if err != nil {
		return nil, err
	}
	a.Proc = p
	return a, nil
}

// Explain adds agentd's last output to err when agentd has exited.
func (a *Agentd) Explain(err error) error {
	if err == nil {
		return nil
	}
	time.Sleep(200 * time.Millisecond)
	if a.Exited() {
		return fmt.Errorf("%w; agentd exited (%s); its last output:\n%s", err, a.cmd.ProcessState, a.Tail())
	}
	return err
}

// LogLines is how many lines agentd has logged.
func (a *Agentd) LogLines() int64 { return a.log.n.Load() }

// MemStats are agentd's Go runtime memory statistics (see ServeDebug).
type MemStats struct {
	HeapAlloc  uint64 `json:"heap_alloc"`
	HeapInuse  uint64 `json:"heap_inuse"`
	HeapSys    uint64 `json:"heap_sys"`
	StackInuse uint64 `json:"stack_inuse"`
	Sys        uint64 `json:"sys"`
	// Where the runtime's mapped memory is besides the live heap (see
	// runtime.MemStats): idle heap spans, the part of them returned to
	// the OS, stacks' spans, span descriptors, the GC's metadata, the rest.
	HeapIdle     uint64 `json:"heap_idle"`
	HeapReleased uint64 `json:"heap_released"`
	StackSys     uint64 `json:"stack_sys"`
	MSpanSys     uint64 `json:"mspan_sys"`
	GCSys        uint64 `json:"gc_sys"`
	OtherSys     uint64 `json:"other_sys"`
	NumGC        uint32 `json:"num_gc"`
	Goroutines   int    `json:"goroutines"`
	// Live is HeapAlloc + StackInuse: the bytes the program holds.
	Live uint64 `json:"live"`
}

// Mem asks agentd for its memory statistics, after a GC when gc.
func (a *Agentd) Mem(ctx context.Context, gc bool) (MemStats, error) {
	var m MemStats
	u := "http://" + a.Debug + "/debug/bench/mem"
	if gc {
		u += "?gc=1"
	}
	err := getJSON(ctx, u, &m)
	return m, err
}

// Profile fetches a pprof profile (kind "profile" for CPU over seconds,
// "heap", "goroutine", …) into path.
func (a *Agentd) Profile(ctx context.Context, kind string, seconds int, path string) error {
	u := "http://" + a.Debug + "/debug/pprof/" + kind
	if kind == "profile" {
		u += "?seconds=" + strconv.Itoa(seconds)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("pprof %s: %s: %s", kind, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Gauge reads one sample of a Prometheus metric from agentd's /metrics.
func (a *Agentd) Gauge(ctx context.Context, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.HTTP+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, name+" ") {
			return strconv.ParseFloat(strings.TrimSpace(l[len(name):]), 64)
		}
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// errNoMetric: the /metrics page has no sample of the metric (an agentd
// without it, or a family without series, such as the Redis round trips on
// the memory store).
var errNoMetric = errors.New("metric not served")

// Counters reads the samples of a metric family from agentd's /metrics,
// keyed by the value of one label ("" when the sample lacks it).
func (a *Agentd) Counters(ctx context.Context, name, label string) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.HTTP+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseCounters(resp.Body, name, label)
}

// parseCounters reads the samples of metric name from the Prometheus text
// format, keyed by the value of label: lines such as
//
//	agentd_redis_round_trips_total{component="sessions"} 42
func parseCounters(r io.Reader, name, label string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		var key string
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("%s: malformed sample %q", name, sc.Text())
			}
			key = labelValue(rest[1:end], label)
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest) // value [timestamp]
		if len(fields) == 0 {
			return nil, fmt.Errorf("%s: malformed sample %q", name, sc.Text())
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[key] += v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w", name, errNoMetric)
	}
	return out, nil
}

// labelValue finds label's value in a sample's label pairs
// (a="x",b="y"), undoing the text format's escapes.
func labelValue(pairs, label string) string {
	for pairs != "" {
		k, rest, ok := strings.Cut(pairs, "=\"")
		if !ok {
			return ""
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(rest[i])
				}
				continue
			}
			v.WriteByte(rest[i])
		}
		if strings.TrimSpace(k) == label {
			return v.String()
		}
		pairs = strings.TrimPrefix(strings.TrimLeft(rest[min(i+1, len(rest)):], " "), ",")
	}
	return ""
}

func getJSON(ctx context.Context, u string, v any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// MockProc is a running `agentd mock-provider`.
type MockProc struct {
	*Proc
	URL string // http://127.0.0.1:port
}

// StartMock runs `bin mock-provider` on a free loopback port.
func StartMock(bin string, args ...string) (*MockProc, error) {
	cmd := exec.Command(bin, append([]string{"mock-provider", "--listen", "127.0.0.1:0"}, args...)...)
	m := &MockProc{}
	p, err := start("mock-provider", cmd, 30*time.Second, func(line string) bool {
		if u, ok := strings.CutPrefix(line, "mock provider listening on "); ok {
			m.URL = strings.TrimSpace(u)
			return true
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	m.Proc = p
	return m, nil
}

// Redis is a redis-server of the bench's own.
type Redis struct {
	*Proc
	Addr string
}

// StartRedis runs redis-server on a free loopback port, keeping nothing on
// disk (see internal/redistest).
func StartRedis(dir string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is not on PATH")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--loglevel", "notice")
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	p, err := start("redis-server", cmd, 10*time.Second, func(line string) bool {
		return strings.Contains(line, "Ready to accept connections")
	})
	if err != nil {
		return nil, err
	}
	r.Proc = p
	return r, nil
}

// Do sends one command on a connection of its own and returns the reply: a
// simple string, an integer or a bulk string as text, nil as "" (a Redis
// error is an error; arrays are not read).
func (r *Redis) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", r.Addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	head = strings.TrimRight(head, "\r\n")
	if head == "" {
		return "", fmt.Errorf("redis %s: empty reply", args[0])
	}
	switch head[0] {
	case '+', ':':
		return head[1:], nil
	case '-':
		return "", fmt.Errorf("redis %s: %s", args[0], head[1:])
	case '$':
		n, err := strconv.Atoi(head[1:])
		if err != nil {
			return "", fmt.Errorf("redis %s: unexpected reply %q", args[0], head)
		}
		if n < 0 {
			return "", nil // nil
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(br, body); err != nil {
			return "", err
		}
		return string(body[:n]), nil
	}
	return "", fmt.Errorf("redis %s: unexpected reply %q", args[0], head)
}

// Info returns the fields of an INFO section.
func (r *Redis) Info(section string) (map[string]string, error) {
	body, err := r.Do("INFO", section)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range strings.Split(body, "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out, nil
}

// UsedMemory is INFO memory's used_memory: the bytes Redis's allocator
// holds for the data (and its own structures).
func (r *Redis) UsedMemory() (int64, error) {
	info, err := r.Info("memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(info["used_memory"], 10, 64)
}

// CommandStats returns INFO commandstats: calls per command.
func (r *Redis) CommandStats() (map[string]int64, error) {
	info, err := r.Info("commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for name, rest := range info {
		// cmdstat_evalsha:calls=12,usec=…
		if !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out, nil
}

// redisCalls is the number of calls in b not in a, excluding INFO itself.
func redisCalls(a, b map[string]int64) (total int64, by map[string]int64) {
	by = map[string]int64{}
	for k, v := range b {
		if k == "info" {
			continue
		}
		if d := v - a[k]; d > 0 {
			by[k] = d
			total += d
		}
	}
	return total, by
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Monitor counts the commands Redis runs, from MONITOR: those clients sent
// (round trips) apart from those scripts ran ([0 lua]). INFO commandstats
// counts both alike.
type Monitor struct {
	conn net.Conn
	mu   sync.Mutex
	top  map[string]int64
	lua  map[string]int64
	done chan struct{}
}

// Monitor starts counting.
func (r *Redis) Monitor() (*Monitor, error) {
	c, err := net.DialTimeout("tcp", r.Addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, "MONITOR\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	m := &Monitor{conn: c, top: map[string]int64{}, lua: map[string]int64{}, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		br := bufio.NewReaderSize(c, 64<<10)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			// +1700000000.123456 [0 127.0.0.1:60866] "evalsha" "…" …
			i := strings.IndexByte(line, '[')
			j := strings.IndexByte(line, ']')
			if i < 0 || j < i {
				continue
			}
			who := line[i+1 : j]
			rest := strings.TrimSpace(line[j+1:])
			name, _, _ := strings.Cut(strings.TrimPrefix(rest, `"`), `"`)
			name = strings.ToLower(name)
			if name == "" || name == "info" || name == "monitor" {
				continue
			}
			m.mu.Lock()
			if strings.HasSuffix(who, " lua") {
				m.lua[name]++
			} else {
				m.top[name]++
			}
			m.mu.Unlock()
		}
	}()
	return m, nil
}

// Counts returns the commands counted so far: sent by clients, and run by
// scripts.
func (m *Monitor) Counts() (top, lua map[string]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	top, lua = map[string]int64{}, map[string]int64{}
	for k, v := range m.top {
		top[k] = v
	}
	for k, v := range m.lua {
		lua[k] = v
	}
	return top, lua
}

// Close stops counting.
func (m *Monitor) Close() {
	m.conn.Close()
	<-m.done
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
