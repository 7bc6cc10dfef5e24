package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `agentd bench --quick` runs every scenario at smoke-test sizes against a
// freshly built agentd and writes its tables. It checks that the tool
// works, not how fast agentd is: benchmarks are never timed assertions.
func TestBenchQuick(t *testing.T) {
	bin := buildAgentd(t)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := runBench([]string{"--agentd", bin, "--quick", "--rounds", "1", "--profile=false", "--out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Scenarios map[string]struct {
			Errors []string         `json:"errors"`
			Rounds []map[string]any `json:"rounds"`
		} `json:"scenarios"`
		Targets []struct{ Name string } `json:"targets"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"overhead", "capacity", "idle-memory", "fanout", "retry"} {
		sc, ok := res.Scenarios[s]
		if !ok || len(sc.Rounds) != 1 || len(sc.Rounds[0]) == 0 {
			t.Errorf("%s: no results", s)
		}
		if len(sc.Errors) > 0 {
			t.Errorf("%s: %v", s, sc.Errors)
		}
	}
	if len(res.Targets) == 0 {
		t.Error("no targets")
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil || !strings.Contains(string(md), "## Targets") || !strings.Contains(stdout.String(), "## overhead") {
		t.Errorf("results.md: %v\n%s", err, md)
	}
}

func TestBenchFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runBench([]string{"--out", t.TempDir(), "--rounds", "1", "nosuch"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "unknown scenario") {
		t.Errorf("unknown scenario: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := runBench([]string{"-h"}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "idle-memory") {
		t.Errorf("-h: exit %d: %s", code, stderr.String())
	}
}
