package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// get returns a GET's status and body, and how long it took.
func get(t *testing.T, url string) (int, string, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), time.Since(start)
}

// writable is agentd_store_writable as /metrics shows it.
func writable(t *testing.T, ts *testServer) string {
	t.Helper()
	return gauge(t, ts, "agentd_store_writable")
}

// gauge is the value of an unlabelled series as /metrics shows it.
func gauge(t *testing.T, ts *testServer, name string) string {
	t.Helper()
	_, body, _ := get(t, ts.baseURL+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	return m[1]
}

// waitReady polls /readyz until it answers code, and returns the body.
func waitReady(ctx context.Context, t *testing.T, ts *testServer, code int) string {
	t.Helper()
	var body string
	redistest.Eventually(ctx, t, fmt.Sprintf("/readyz answers %d", code), func(context.Context) (bool, error) {
		got, b, took := get(t, ts.baseURL+"/readyz")
		if took > 1500*time.Millisecond {
			t.Errorf("/readyz took %v", took)
		}
		body = b
		if got != code {
			return false, fmt.Errorf("%d %q", got, b)
		}
		return true, nil
	})
	return body
}

func TestReadyzMemoryStore(t *testing.T) {
	ts := start(t, "")
	if code, body, _ := get(t, ts.baseURL+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz = %d %q", code, body)
	}
	if v := writable(t, ts); v != "1" {
		t.Errorf("agentd_store_writable = %s", v)
	}
}

// A credential store cut off from its keys (an ACL that lets agentd write
// its sessions and the probe, not its credentials) is degraded, yet the
// store writes: 200, with "degraded". The password comes from password_env.
func TestReadyzDegradedCredentialsStayReady(t *testing.T) {
	srv := redistest.StartWith(t, "--user", "default", "on", ">pw-of-redis", "resetkeys",
		"~agentd:probe:*", "~agentd:{ses_*", "~agentd:sessions:*", "~agentd:tenant:*", "~agentd:replica:*", "&*", "+@all")
	t.Setenv("T_REDIS_PASSWORD", "pw-of-redis")
	ts := start(t, fmt.Sprintf("store: {backend: redis, redis: {addr: %s, password_env: T_REDIS_PASSWORD}}\n", srv.Addr()))
	ctx := testkit.Context(t)
	body := waitReady(ctx, t, ts, 200)
	redistest.Eventually(ctx, t, "/readyz says degraded", func(context.Context) (bool, error) {
		_, body, _ = get(t, ts.baseURL+"/readyz")
		return strings.HasPrefix(body, "ready (degraded: "), nil
	})
	if strings.Contains(body, "pw-of-redis") {
		t.Errorf("the password is in /readyz: %q", body)
	}
	if v := writable(t, ts); v != "1" {
		t.Errorf("agentd_store_writable = %s", v)
	}
}

// With min_replica_acks, a master whose replica is gone still writes but
// refuses new sessions and prompts: /readyz stays 200 and says why (every
// replica of agentd shares that store: none would do better), with
// agentd_store_replicas_short 1, and is plain "ready" again once a replica
// is back in sync.
func TestReadyzReplicasShort(t *testing.T) {
	master := redistest.StartWith(t, "--repl-diskless-sync-delay", "0") // a replica syncs at once
	replica := redistest.StartWith(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	ts := start(t, fmt.Sprintf("store: {backend: redis, redis: {addr: %s, min_replica_acks: 1}}\n", master.Addr()))
	ctx := testkit.Context(t)
	readyAs := func(what, want string) string {
		t.Helper()
		var body string
		redistest.Eventually(ctx, t, what, func(context.Context) (bool, error) {
			var code int
			code, body, _ = get(t, ts.baseURL+"/readyz")
			if code != 200 || !strings.HasPrefix(body, want) {
				return false, fmt.Errorf("%d %q", code, body)
			}
			return true, nil
		})
		return body
	}
	create := func() error {
		_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
		return err
	}
	readyAs("the replica acknowledges the probe", "ready\n")
	if err := create(); err != nil {
		t.Fatalf("CreateSession with the replica in sync: %v", err)
	}

	replica.Kill()
	body := readyAs("/readyz says the master is short of replicas", "ready (degraded: NOREPLICAS: 0 of 1 replicas acknowledged the probe's write within ")
	if !strings.Contains(body, "store.redis.min_replica_acks") {
		t.Errorf("/readyz body %q does not name the setting", body)
	}
	if w, s := writable(t, ts), gauge(t, ts, "agentd_store_replicas_short"); w != "1" || s != "1" {
		t.Errorf("agentd_store_writable %s, agentd_store_replicas_short %s; want 1 and 1", w, s)
	}
	if err := create(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Errorf("CreateSession without a replica = %v, want UNAVAILABLE naming the replicas", err)
	}

	replica.Start()
	readyAs("the replica is back in sync", "ready\n")
	if s := gauge(t, ts, "agentd_store_replicas_short"); s != "0" {
		t.Errorf("agentd_store_replicas_short %s once the replica is back", s)
	}
	if err := create(); err != nil {
		t.Fatalf("CreateSession once the replica is back: %v", err)
	}
}

// With Sentinel, /readyz is 503 while the master is dead and 200 once a
// replica is promoted, without a restart; agentd_store_writable follows.
func TestReadyzSentinelMasterKilled(t *testing.T) {
	s := redistest.StartSentinel(t)
	ts := start(t, fmt.Sprintf("store: {backend: redis, redis: {addrs: [%s], master_name: %s}}\n",
		strings.Join(s.Addrs(), ", "), redistest.MasterName))
	ctx := testkit.Context(t)
	waitReady(ctx, t, ts, 200)
	old, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	s.Kill(old)
	body := waitReady(ctx, t, ts, 503)
	if !strings.Contains(body, "not ready: the store cannot write: ") {
		t.Errorf("/readyz body %q", body)
	}
	if v := writable(t, ts); v != "0" {
		t.Errorf("agentd_store_writable = %s while the master is dead", v)
	}
	waitReady(ctx, t, ts, 200)
	t.Logf("master killed: /readyz 503 (%q), 200 again after %v", strings.TrimSpace(body), time.Since(killed).Round(time.Millisecond))
	if v := writable(t, ts); v != "1" {
		t.Errorf("agentd_store_writable = %s after the failover", v)
	}
}

// On a Cluster: behind one node's address with cluster: false, /readyz is
// 503 naming MOVED and store.redis.cluster: true; with cluster: true it is
// 200, 503 while a master is dead, 200 once its replica took over.
func TestReadyzCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testkit.Context(t)

	single := start(t, fmt.Sprintf("store: {backend: redis, redis: {addr: %s}}\n", cl.Nodes[0].Addr()))
	code, body, _ := get(t, single.baseURL+"/readyz")
	if code != 503 || !strings.Contains(body, "MOVED") || !strings.Contains(body, "store.redis.cluster: true") {
		t.Fatalf("/readyz behind one Cluster node = %d %q", code, body)
	}

	ts := start(t, fmt.Sprintf("store: {backend: redis, redis: {addrs: [%s], cluster: true}}\n", strings.Join(cl.Addrs()[:3], ", ")))
	waitReady(ctx, t, ts, 200)
	old, err := cl.MasterOf(ctx, "agentd:{ses_x}:meta")
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	cl.Kill(old)
	body = waitReady(ctx, t, ts, 503)
	waitReady(ctx, t, ts, 200)
	t.Logf("master killed: /readyz 503 (%q), 200 again after %v", strings.TrimSpace(body), time.Since(killed).Round(time.Millisecond))
}
