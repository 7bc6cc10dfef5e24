package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// Every test must leave no goroutine behind.
func TestMain(m *testing.M) {
	redistest.VerifyTestMain(m)
}

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse(strings.NewReader(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// held binds a loopback port and keeps it bound until the test ends.
func held(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// freeAddr is a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// redisClients counts the connections to the Redis at addr other than the
// caller's own.
func redisClients(ctx context.Context, addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		return 0, err
	}
	return strings.Count(strings.TrimSpace(list), "\n"), nil
}

// A step that fails after the Redis store was opened (a listener whose
// address is taken) closes everything the steps before it had started:
// the Redis client and its connections, the stores' goroutines, the
// session engine's, and the listeners already bound.
func TestNewRollsBackAfterRedis(t *testing.T) {
	rs := redistest.Start(t)
	for _, tc := range []struct {
		name, failing string
		yaml          func(grpc string) string
	}{
		{"http listener", "listen.http", func(grpc string) string {
			return fmt.Sprintf("listen: {grpc: %s, http: %s}\n", grpc, held(t))
		}},
		{"metrics listener", "metrics.listen", func(grpc string) string {
			return fmt.Sprintf("listen: {grpc: %s, http: 127.0.0.1:0}\nmetrics: {listen: %s}\n", grpc, held(t))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testkit.Context(t)
			before := goleak.IgnoreCurrent()
			grpcAddr := freeAddr(t)
			prefix := strings.ReplaceAll(tc.name, " ", "-") + ":"
			cfg := parse(t, tc.yaml(grpcAddr)+fmt.Sprintf(
				"store:\n  backend: redis\n  redis: {addr: %q, key_prefix: %q}\n"+
					"retry: {budget: {max_tokens: 10, token_ratio: 0.1}}\n"+
					"providers: [{name: sim, kind: simulated, credentials: [{id: k1, api_key: sk-1}]}]\n", rs.Addr(), prefix))
			a, err := app.New(cfg, nil)
			if err == nil {
				a.Stop(ctx)
				t.Fatal("app.New: no error with a taken address")
			}
			if !strings.Contains(err.Error(), tc.failing) {
				t.Fatalf("app.New: %v, want an error naming %s", err, tc.failing)
			}
			// The stores had written: Redis was reached before the failure.
			// A probe of its own, closed at once: the connections counted
			// below must be agentd's only.
			probe := redis.NewClient(&redis.Options{Addr: rs.Addr()})
			keys, err := probe.Keys(ctx, prefix+"*").Result()
			probe.Close()
			if err != nil || len(keys) == 0 {
				t.Fatalf("no key under %s in Redis (%v): the failing step came before the stores", prefix, err)
			}
			goleak.VerifyNone(t, before)
			redistest.Eventually(ctx, t, "agentd's Redis connections closed", func(ctx context.Context) (bool, error) {
				n, err := redisClients(ctx, rs.Addr())
				return n == 0, err
			})
			// The gRPC listener, bound before the failing one, is free again.
			l, err := net.Listen("tcp", grpcAddr)
			if err != nil {
				t.Fatalf("the gRPC address is still bound after the failed start: %v", err)
			}
			l.Close()
		})
	}
}

// Run serves until its context ends, then drains and closes the stores:
// nothing of the Redis client is left.
func TestRunStopsEverything(t *testing.T) {
	rs := redistest.Start(t)
	ctx := testkit.Context(t)
	cfg := parse(t, fmt.Sprintf("listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n"+
		"store:\n  backend: redis\n  redis: {addr: %q, key_prefix: \"run:\"}\n", rs.Addr()))
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+a.Server().HTTPAddr()+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %s", resp.Status)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return")
	}
	redistest.Eventually(ctx, t, "agentd's Redis connections closed", func(ctx context.Context) (bool, error) {
		n, err := redisClients(ctx, rs.Addr())
		return n == 0, err
	})
}

// Started on a Redis that may evict keys (a maxmemory and an allkeys-lru
// policy), agentd says so in a warning naming the policy and the fix; on
// one that may not, it says nothing of it.
func TestStartWarnsOfAnEvictingRedis(t *testing.T) {
	ctx := testkit.Context(t)
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}, true},
		{[]string{"--maxmemory", "64mb"}, false},
	} {
		rs := redistest.StartWith(t, tc.args...)
		var logs testkit.LogBuffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		cfg := parse(t, fmt.Sprintf("listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n"+
			"store:\n  backend: redis\n  redis: {addr: %q}\n", rs.Addr()))
		a, err := app.New(cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		a.Stop(ctx)
		out := logs.String()
		warned := strings.Contains(out, "level=WARN") && strings.Contains(out, "Redis may evict agentd's keys") &&
			strings.Contains(out, "maxmemory-policy allkeys-lru") && strings.Contains(out, "set maxmemory-policy noeviction")
		if warned != tc.warn {
			t.Errorf("redis-server %v: warned %v, want %v; the log:\n%s", tc.args, warned, tc.warn, out)
		}
	}
}

// agentd on a Redis it reaches over TLS (a client certificate asked for)
// as an ACL user confined to its key prefix and its channels, as the
// README's ACL gives it: readiness, a session's creation, a prompt and
// its events, the history, a credential added and removed and the
// session's deletion all work, and no command was refused.
func TestRedisOverTLSAsAnACLUser(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	rs, tlsAddr := redistest.StartTLS(t, files, true)
	ctx := testkit.Context(t)
	if err := redistest.Client(t, rs.Addr()).Do(ctx, "acl", "setuser", "agentd", "reset", "on", ">pw-of-agentd",
		"~agentd:*", "&agentd:*", "+@all", "-@dangerous", "+info").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("T_AGENTD_REDIS_PASSWORD", "pw-of-agentd")
	cfg := parse(t, fmt.Sprintf("listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n"+
		"store:\n  backend: redis\n  redis:\n    addr: %q\n    username: agentd\n    password_env: T_AGENTD_REDIS_PASSWORD\n"+
		"    tls: {enabled: true, ca_file: %q, cert_file: %q, key_file: %q}\n", tlsAddr, files.CA, files.ClientCert, files.ClientKey))
	logs := exerciseOverRedis(ctx, t, cfg)
	if strings.Contains(logs, "NOPERM") || strings.Contains(logs, "level=ERROR") {
		t.Fatalf("agentd's log:\n%s", logs)
	}
}

// exerciseOverRedis runs agentd on cfg (a Redis store) and goes through
// what it offers: readiness, a session's creation, a prompt and its
// events, the history, a credential added and removed, the session's
// deletion; it returns agentd's log.
func exerciseOverRedis(ctx context.Context, t *testing.T, cfg *config.Config) string {
	t.Helper()
	var logs testkit.LogBuffer
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	base := "http://" + a.Server().HTTPAddr()
	call := func(method, path, body string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s %s", method, path, resp.Status, out)
		}
		return string(out)
	}
	call("GET", "/readyz", "")
	var s struct{ ID string }
	if err := json.Unmarshal([]byte(call("POST", "/v1/sessions", `{"model": "sim/echo"}`)), &s); err != nil {
		t.Fatal(err)
	}
	if stream := call("POST", "/v1/sessions/"+s.ID+":prompt", `{"text": "hello over TLS"}`); !strings.Contains(stream, `"outcome":"completed"`) {
		t.Fatalf("the prompt's stream:\n%s", stream)
	}
	if msgs := call("GET", "/v1/sessions/"+s.ID+"/messages", ""); strings.Count(msgs, `"role"`) != 2 {
		t.Fatalf("the history: %s", msgs)
	}
	call("POST", "/v1/credentials", `{"id": "k1", "provider": "sim", "secret": "sk-test-1"}`)
	call("DELETE", "/v1/credentials/k1", "")
	call("DELETE", "/v1/sessions/"+s.ID, "")
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	return logs.String()
}

// agentd on a Redis Cluster and on Sentinel, every node (the Sentinels
// too) reached over TLS only: the Cluster's redirections and the
// Sentinels' answers name TLS addresses, and everything works on them.
func TestRedisTopologiesOverTLS(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	tlsYAML := fmt.Sprintf("    tls: {enabled: true, ca_file: %q}\n", files.CA)
	flow := func(addrs []string) string { return "[" + strings.Join(addrs, ", ") + "]" }
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"cluster", func(t *testing.T) string {
			return "    cluster: true\n    addrs: " + flow(redistest.StartClusterTLS(t, files).TLSAddrs()[:2]) + "\n"
		}},
		{"sentinel", func(t *testing.T) string {
			return "    master_name: " + redistest.MasterName + "\n    addrs: " + flow(redistest.StartSentinelTLS(t, files).TLSAddrs()) + "\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testkit.Context(t)
			cfg := parse(t, "listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\nstore:\n  backend: redis\n  redis:\n"+tc.store(t)+tlsYAML)
			if logs := exerciseOverRedis(ctx, t, cfg); strings.Contains(logs, "level=ERROR") {
				t.Fatalf("agentd's log:\n%s", logs)
			}
		})
	}
}
