package redisconn

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// flowList is addrs as a YAML flow sequence.
func flowList(t *testing.T, addrs []string) string {
	t.Helper()
	b, err := json.Marshal(addrs)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A Cluster over TLS: agentd, given two nodes' TLS addresses, is told the
// others' TLS ports by the Cluster and writes on every master; a master
// killed, writes on its slots resume on the promoted replica, over TLS as
// well (a connection to a plain port would fail its handshake).
func TestTLSClusterMasterKilled(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	cl := redistest.StartClusterTLS(t, files)
	ctx := testkit.ContextFor(t, 60*time.Second)
	c := newConn(t, fromYAML(t, fmt.Sprintf("{cluster: true, addrs: %s, tls: {enabled: true, ca_file: %q}}",
		flowList(t, cl.TLSAddrs()[:2]), files.CA)))
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("Probe of a TLS Cluster = %v", err)
	}
	if err := c.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := cl.MasterOf(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cl.Kill(old)
	if d := writesResume(ctx, t, c, "TLS Cluster master killed", start); d > 15*time.Second {
		t.Errorf("writes resumed after %v", d)
	}
	redistest.Eventually(ctx, t, "the probe writes on every master", func(ctx context.Context) (bool, error) {
		err := c.Probe(ctx)
		return err == nil, err
	})
}

// Sentinel over TLS: agentd asks the Sentinels on their TLS ports, is told
// the master's TLS address, and writes; the master killed, the Sentinels
// promote the replica and writes resume on it.
func TestTLSSentinelMasterKilled(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	s := redistest.StartSentinelTLS(t, files)
	ctx := testkit.ContextFor(t, 60*time.Second)
	c := newConn(t, fromYAML(t, fmt.Sprintf("{master_name: %s, addrs: %s, tls: {enabled: true, ca_file: %q}}",
		redistest.MasterName, flowList(t, s.TLSAddrs()), files.CA)))
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("Probe through TLS Sentinels = %v", err)
	}
	sentinelMasterKilled(ctx, t, s, c)
}
