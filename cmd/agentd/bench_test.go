package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/redistest"
)

// benchResults is what the tests read of results.json.
type benchResults struct {
	Stores    []string `json:"stores"`
	Baseline  string   `json:"baseline"`
	Scenarios map[string]struct {
		Errors []string         `json:"errors"`
		Rounds []map[string]any `json:"rounds"`
	} `json:"scenarios"`
	Targets []struct{ Name string } `json:"targets"`
}

// runQuickBench runs `agentd bench --agentd <a fresh build> --quick
// --rounds 1 --profile=false --out <dir>` with args, fails the test unless
// it exits 0, and returns results.json, the binary, the output directory
// and stdout.
func runQuickBench(t *testing.T, args ...string) (res benchResults, bin, out, stdout string) {
	t.Helper()
	bin = buildAgentd(t)
	out = t.TempDir()
	var so, se bytes.Buffer
	all := append([]string{"--agentd", bin, "--quick", "--rounds", "1", "--profile=false", "--out", out}, args...)
	for i, a := range all {
		all[i] = strings.ReplaceAll(a, "{bin}", bin)
	}
	if code := runBench(all, &so, &se); code != 0 {
		t.Fatalf("exit %d\n%s", code, se.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return res, bin, out, so.String()
}

// `agentd bench --quick` runs every scenario at smoke-test sizes against a
// freshly built agentd and writes its tables. It checks that the tool
// works, not how fast agentd is: benchmarks are never timed assertions.
func TestBenchQuick(t *testing.T) {
	res, _, out, stdout := runQuickBench(t)
	for _, s := range []string{"overhead", "capacity", "idle-memory", "fanout", "retry"} {
		sc, ok := res.Scenarios[s]
		if !ok || len(sc.Rounds) != 1 || len(sc.Rounds[0]) == 0 {
			t.Errorf("%s: no results", s)
		}
		if len(sc.Errors) > 0 {
			t.Errorf("%s: %v", s, sc.Errors)
		}
	}
	// Capacity's one-transport steps ran and were set against the floor.
	if rs := res.Scenarios["capacity"].Rounds; len(rs) == 1 {
		for _, k := range []string{"cpu_us_per_prompt.rest", "cpu_us_per_prompt.grpc", "cpu_us_per_request.floor", "cpu_ratio_to_floor.rest", "cpu_ratio_to_floor.grpc",
			"grpc_floor.cpu_us_per_request", "grpc_floor.cpu_ratio_to_floor", "cpu_ratio_to_grpc_floor.grpc"} {
			if v, ok := rs[0][k].(float64); !ok || v <= 0 {
				t.Errorf("capacity: %s = %v", k, rs[0][k])
			}
		}
	}
	// The overhead's gRPC floor ran beside the other paths.
	if rs := res.Scenarios["overhead"].Rounds; len(rs) == 1 {
		for _, k := range []string{"added_ttft.grpc_floor.p50", "ratio_to_floor.grpc_floor.p50", "ratio_to_grpc_floor.grpc.p50"} {
			if v, ok := rs[0][k].(float64); !ok || v <= 0 {
				t.Errorf("overhead: %s = %v", k, rs[0][k])
			}
		}
	}
	if len(res.Targets) == 0 {
		t.Error("no targets")
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil || !strings.Contains(string(md), "## Targets") || !strings.Contains(stdout, "## overhead") {
		t.Errorf("results.md: %v\n%s", err, md)
	}
}

// `agentd bench --quick --store both` runs the store-dependent scenarios on
// the memory store and on the Redis store (a redis-server of the bench's
// own): the memory runs' metrics keep their names, the Redis runs' are the
// same names prefixed "redis.".
func TestBenchQuickRedis(t *testing.T) {
	redistest.Require(t)
	res, _, _, md := runQuickBench(t, "--store", "both", "overhead", "capacity", "idle-memory", "fanout")
	if strings.Join(res.Stores, ",") != "memory,redis" {
		t.Errorf("stores %v", res.Stores)
	}
	// A metric of each scenario, on each store.
	for s, k := range map[string]string{"overhead": "added_ttft.grpc.p50", "capacity": "rate.20.completed",
		"idle-memory": "100.total_live_mib", "fanout": "n10.last.p99"} {
		sc, ok := res.Scenarios[s]
		if !ok || len(sc.Rounds) != 1 {
			t.Errorf("%s: no results", s)
			continue
		}
		if len(sc.Errors) > 0 {
			t.Errorf("%s: %v", s, sc.Errors)
		}
		for _, key := range []string{k, "redis." + k} {
			if v, ok := sc.Rounds[0][key].(float64); !ok || v <= 0 {
				t.Errorf("%s: %s = %v", s, key, sc.Rounds[0][key])
			}
		}
	}
	if rs := res.Scenarios["capacity"].Rounds; len(rs) == 1 {
		for _, k := range []string{"cpu_ratio_to_floor.rest", "cpu_ratio_to_floor.grpc", "redis.cpu_ratio_to_floor.rest", "redis.cpu_ratio_to_floor.grpc"} {
			if v, ok := rs[0][k].(float64); !ok || v <= 0 {
				t.Errorf("capacity: %s = %v", k, rs[0][k])
			}
		}
	}
	if v, ok := res.Scenarios["idle-memory"].Rounds[0]["redis.100.redis_server_used_mib"].(float64); !ok || v <= 0 {
		t.Errorf("redis-server's memory not measured: %v", v)
	}
	for _, s := range []string{"| agentd gRPC, Redis store |", "| 20, Redis store |", "| 100, Redis store |", "| 10, Redis store | yes |"} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q:\n%s", s, md)
		}
	}
}

// `agentd bench --baseline OLD overhead` runs a second agentd beside the
// one under test (here the same binary) and sets each path's added TTFT,
// per-chunk transit and CPU per prompt against the baseline's.
func TestBenchQuickBaseline(t *testing.T) {
	res, bin, _, stdout := runQuickBench(t, "--baseline", "{bin}", "--baseline-version", "same", "overhead")
	if res.Baseline != bin+" (same)" {
		t.Errorf("baseline = %q", res.Baseline)
	}
	sc := res.Scenarios["overhead"]
	if len(sc.Errors) > 0 || len(sc.Rounds) != 1 {
		t.Fatalf("overhead: %d rounds, errors %v", len(sc.Rounds), sc.Errors)
	}
	for _, k := range []string{"ratio_to_baseline.rest.p50", "ratio_to_baseline.grpc.p50", "ratio_to_baseline.cpu_per_prompt",
		"baseline.cpu_us_per_prompt", "errors.rest_baseline", "errors.grpc_baseline"} {
		v, ok := sc.Rounds[0][k].(float64)
		if !ok || (v <= 0) != strings.HasPrefix(k, "errors.") {
			t.Errorf("%s = %v", k, sc.Rounds[0][k])
		}
	}
	if !strings.Contains(stdout, "**Against the baseline**") || !strings.Contains(stdout, "| baseline agentd gRPC |") {
		t.Errorf("results.md has no baseline:\n%s", stdout)
	}
}

func TestBenchFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runBench([]string{"--out", t.TempDir(), "--rounds", "1", "nosuch"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "unknown scenario") {
		t.Errorf("unknown scenario: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := runBench([]string{"--out", t.TempDir(), "--store", "etcd"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "memory, redis or both") {
		t.Errorf("--store etcd: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := runBench([]string{"--out", t.TempDir(), "--baseline", filepath.Join(t.TempDir(), "none")}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--baseline") {
		t.Errorf("--baseline missing: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := runBench([]string{"-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "idle-memory") {
		t.Errorf("-h: exit %d: %s", code, stderr.String())
	}
}
