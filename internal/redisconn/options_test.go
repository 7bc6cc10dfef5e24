package redisconn

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// go-redis' log lines come out as records of agentd's log.
func TestRedisLoggerWritesJSONRecords(t *testing.T) {
	var buf bytes.Buffer
	l := goRedisLogger{log: slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v\n", 5, "refused")
	//lint:ignore SA1012 go-redis may pass a nil context: the logger must tolerate it
	l.Printf(nil, "redis: %s", "no context")
	// Sentinel's news of a master (go-redis' own formats) is no trouble.
	l.Printf(context.Background(), "sentinel: new master=%q addr=%q", "mymaster", "127.0.0.1:6380")
	l.Printf(context.Background(), "sentinel: selected addr=%s masterAddr=%s", "127.0.0.1:26379", "127.0.0.1:6380")
	l.Printf(context.Background(), "sentinel: GetMasterAddrByName name=%q failed: %s", "mymaster", "i/o timeout")
	recs := logRecords(t, buf.String())
	if len(recs) != 5 {
		t.Fatalf("records %v, want 5", recs)
	}
	for i, want := range []string{"WARN", "WARN", "INFO", "INFO", "WARN"} {
		if recs[i]["level"] != want {
			t.Errorf("record %d %v: level %v, want %s", i, recs[i]["msg"], recs[i]["level"], want)
		}
	}
	if recs[2]["msg"] != `sentinel: new master="mymaster" addr="127.0.0.1:6380"` {
		t.Errorf("record %v", recs[2])
	}
	if recs[0]["level"] != "WARN" || recs[0]["component"] != "go-redis" ||
		recs[0]["msg"] != "redis: connection pool: failed to dial after 5 attempts: refused" {
		t.Errorf("record %v", recs[0])
	}
	if recs[1]["msg"] != "redis: no context" {
		t.Errorf("record %v", recs[1])
	}
}

// logRecords parses JSON log lines.
func logRecords(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		recs = append(recs, r)
	}
	return recs
}
