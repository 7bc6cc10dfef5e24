package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

// agentd serve runs on one P while it idles, unless the environment sets
// GOMAXPROCS: two processes started together, one of each, idle; once the
// adaptive one reports one P, the other still reports the two it was
// given.
func TestServeAdaptsGOMAXPROCSUnlessSet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs agentd processes")
	}
	bin := buildAgentd(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			env = append(env, kv)
		}
	}
	adaptive := serveWithEnv(t, bin, env)
	fixed := serveWithEnv(t, bin, append(env[:len(env):len(env)], "GOMAXPROCS=2"))
	// Read twice a second: a scrape takes CPU too, and scraped a hundred
	// times a second agentd is not idle.
	testkit.EventuallyCtx(testkit.Context(t), t, 500*time.Millisecond, "the idle adaptive agentd on one P",
		func(context.Context) (bool, error) { return gomaxprocs(t, adaptive) == "1", nil })
	if got := gomaxprocs(t, fixed); got != "2" {
		t.Errorf("agentd serve with GOMAXPROCS=2 reports go_sched_gomaxprocs_threads %s, want 2", got)
	}
}

// serveWithEnv runs `agentd serve` on its defaults (memory store, the
// simulated provider) on free loopback ports with the environment env, and
// returns its HTTP base URL once it serves; the test's cleanup stops it.
func serveWithEnv(t *testing.T, bin string, env []string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agentd.yaml")
	if err := os.WriteFile(path, []byte("listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", path, "--log-format", "json")
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	up := make(chan string, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, HTTP string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "agentd serving" {
				up <- "http://" + line.HTTP
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	})
	ctx := testkit.Context(t)
	select {
	case base := <-up:
		return base
	case <-done:
		t.Fatal("agentd serve exited before serving")
	case <-ctx.Done():
		t.Fatal("agentd serve did not start")
	}
	return ""
}

// gomaxprocs is the go_sched_gomaxprocs_threads value on base's /metrics.
func gomaxprocs(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_sched_gomaxprocs_threads "); ok {
			return v
		}
	}
	t.Fatalf("%s/metrics has no go_sched_gomaxprocs_threads", base)
	return ""
}
