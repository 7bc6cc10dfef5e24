package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/testkit"
)

// syncBuffer is a bytes.Buffer safe for a logger writing while a test reads.
type syncBuffer = testkit.LogBuffer

// logRecords returns the JSON records of a log, failing on a line that is
// not one.
func logRecords(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if line == "" || strings.HasPrefix(line, "agentd serve: ") {
			continue // the command's own error, written after the log
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Errorf("log line is not a JSON record: %q", line)
			continue
		}
		out = append(out, r)
	}
	return out
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agentd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveWatch is serve's stderr: it tells when serve logs that it serves.
type serveWatch struct {
	syncBuffer
	once    sync.Once
	serving chan struct{}
}

func (w *serveWatch) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if strings.Contains(w.String(), `"msg":"agentd serving"`) {
		w.once.Do(func() { close(w.serving) })
	}
	return n, err
}

// runRefused runs args, which must stop start-up: it returns the exit code
// and stderr. If agentd serves instead, the test fails and agentd is
// stopped as a terminal's ^C stops it.
func runRefused(t *testing.T, args []string) (int, string) {
	t.Helper()
	w := &serveWatch{serving: make(chan struct{})}
	done := make(chan int, 1)
	go func() { done <- run(args, strings.NewReader(""), io.Discard, w) }()
	select {
	case code := <-done:
		return code, w.String()
	case <-w.serving:
		t.Errorf("%v: agentd serves:\n%s", args, w.String())
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		return <-done, w.String()
	}
}

// The listen flags obey the file's rules: without auth.tokens, a
// non-loopback --http-addr or --grpc-addr stops start-up before anything
// listens, as the same address in the file does.
func TestServeListenFlagsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--http-addr", "192.0.2.2:0"},
			`agentd serve: --http-addr: config: listen.http: "192.0.2.2:0" is not a loopback address; without auth.tokens agentd listens on loopback only`},
		{[]string{"serve", "--grpc-addr", "192.0.2.2:0", "--http-addr", "127.0.0.1:0"},
			`agentd serve: --grpc-addr: config: listen.grpc: "192.0.2.2:0" is not a loopback address`},
		{[]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "0.0.0.0:0"},
			`agentd serve: --http-addr: config: listen.http: "0.0.0.0:0" is not a loopback address`},
		{[]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "nonsense"},
			`agentd serve: --http-addr: config: listen.http: "nonsense" is not host:port`},
	} {
		code, stderr := runRefused(t, tc.args)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want non-zero and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// A Redis store without store.redis.secret_key_env holds credential
// secrets in clear: serve says so in its log at start.
func TestServeWarnsOfSecretsInClearInRedis(t *testing.T) {
	cfg := writeConfig(t, "store: {backend: redis}\n")
	var stdout, stderr bytes.Buffer
	// The listen flag then stops start-up, before Redis is dialled.
	code := run([]string{"serve", "--config", cfg, "--log-format", "json", "--http-addr", "192.0.2.2:0"}, strings.NewReader(""), &stdout, &stderr)
	if code == 0 {
		t.Fatalf("serve exited 0: %s", stderr.String())
	}
	found := false
	for _, r := range logRecords(t, stderr.String()) {
		msg, _ := r["msg"].(string)
		if r["level"] == "WARN" && strings.Contains(msg, "credential secrets are stored in clear in Redis") &&
			strings.Contains(msg, "store.redis.secret_key_env") && r["key"] == "store.redis.secret_key_env" {
			found = true
		}
	}
	if !found {
		t.Errorf("no warning naming store.redis.secret_key_env in the log:\n%s", stderr.String())
	}
}

func TestWarnConfig(t *testing.T) {
	t.Setenv("AGENTD_TEST_REDIS_KEY", strings.Repeat("k", 32))
	t.Setenv("AGENTD_TEST_TICKET_KEY", strings.Repeat("t", 32))
	for _, tc := range []struct {
		yaml string
		want []string // the keys warned about
	}{
		{"", nil},
		{"store: {backend: redis}", []string{"store.redis.secret_key_env", "http.ticket_key_env"}},
		{"store: {backend: redis, redis: {secret_key_env: AGENTD_TEST_REDIS_KEY}}", []string{"http.ticket_key_env"}},
		{"store: {backend: redis, redis: {secret_key_env: AGENTD_TEST_REDIS_KEY}}\nhttp: {ticket_key_env: AGENTD_TEST_TICKET_KEY}", nil},
	} {
		cfg, err := loadConfig(t, tc.yaml)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		warnConfig(cfg, slog.New(slog.NewJSONHandler(&buf, nil)))
		var got []string
		for _, r := range logRecords(t, buf.String()) {
			if r["level"] != "WARN" {
				t.Errorf("%q: record %v is not a warning", tc.yaml, r)
			}
			got = append(got, r["key"].(string))
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%q: warned about %v, want %v", tc.yaml, got, tc.want)
		}
	}
}

func loadConfig(t *testing.T, yaml string) (*config.Config, error) {
	t.Helper()
	return config.Load(writeConfig(t, yaml))
}

// serve routes go-redis' logger through its slog logger: after serve set
// it up, a line go-redis logs lands in serve's log as a JSON record.
func TestServeRoutesRedisLogsThroughSlog(t *testing.T) {
	t.Cleanup(func() { redisconn.SetLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))) })
	var stdout bytes.Buffer
	var stderr syncBuffer
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	if code := run([]string{"serve", "--config", missing, "--log-format", "json"}, strings.NewReader(""), &stdout, &stderr); code == 0 {
		t.Fatalf("serve with a missing config exited 0: %s", stderr.String())
	}
	// go-redis warns of a sub-second EXPIRE when it builds the command: a
	// pipeline that is never executed dials nothing.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	c.Pipeline().Expire(context.Background(), "k", 500*time.Millisecond)
	found := false
	for _, r := range logRecords(t, stderr.String()) {
		msg, _ := r["msg"].(string)
		if r["component"] == "go-redis" && strings.Contains(msg, "specified duration is 500ms") {
			found = true
		}
	}
	if !found {
		t.Errorf("go-redis' line is not a record of serve's log:\n%s", stderr.String())
	}
}
