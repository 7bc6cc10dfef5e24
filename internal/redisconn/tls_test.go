package redisconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// fromYAML is the Options of a store.redis section.
func fromYAML(t *testing.T, redisYAML string) Options {
	t.Helper()
	cfg, err := config.Parse(strings.NewReader("store: {backend: redis, redis: " + redisYAML + "}"))
	if err != nil {
		t.Fatal(err)
	}
	o := FromConfig(cfg.Store.Redis)
	o.KeyPrefix = "t:"
	return o
}

// Over TLS, with a server that asks for a client certificate: the
// configured CA, certificate and ACL user write; a client without its
// certificate, with another CA, without TLS or with a wrong password does
// not, and the probe says why.
func TestTLSAndACLUser(t *testing.T) {
	files := redistest.NewTLSFiles(t)
	srv, addr := redistest.StartTLS(t, files, true)
	ctx := testkit.Context(t)
	if err := redistest.Client(t, srv.Addr()).Do(ctx, "acl", "setuser", "agentd", "on", ">pw-of-agentd",
		"~t:*", "&t:*", "+@all", "-@dangerous", "+info").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("T_PW", "pw-of-agentd")
	t.Setenv("T_WRONG_PW", "not-the-password")
	withTLS := func(extra string) string {
		return fmt.Sprintf("{addr: %q, username: agentd, password_env: T_PW, tls: {enabled: true, ca_file: %q%s}}", addr, files.CA, extra)
	}
	c := newConn(t, fromYAML(t, withTLS(fmt.Sprintf(", cert_file: %q, key_file: %q", files.ClientCert, files.ClientKey))))
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("Probe over TLS as agentd = %v", err)
	}
	if err := c.Client().Set(ctx, "other:key", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("a key outside agentd's prefix = %v, want NOPERM (the ACL user is in effect)", err)
	}

	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"no client certificate", withTLS(""), "tls"},
		{"another CA", fmt.Sprintf("{addr: %q, username: agentd, password_env: T_PW, tls: {enabled: true, cert_file: %q, key_file: %q}}",
			addr, files.ClientCert, files.ClientKey), "certificate signed by unknown authority"},
		{"no TLS", fmt.Sprintf("{addr: %q, username: agentd, password_env: T_PW}", addr), ""},
		{"a wrong password", strings.Replace(withTLS(fmt.Sprintf(", cert_file: %q, key_file: %q", files.ClientCert, files.ClientKey)),
			"T_PW", "T_WRONG_PW", 1), "store.redis.username and store.redis.password_env"},
	} {
		c := newConn(t, fromYAML(t, tc.yaml))
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Probe(pctx)
		cancel()
		var nw *NotWritableError
		if !errors.As(err, &nw) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Probe = %v, want a NotWritableError saying %q", tc.name, err, tc.want)
		}
		if strings.Contains(fmt.Sprint(err), "pw-of-agentd") || strings.Contains(fmt.Sprint(err), "not-the-password") {
			t.Errorf("%s: the error shows a password: %v", tc.name, err)
		}
	}

	// Sentinel's connections go through agentd's own dialer (it tracks
	// them), which then makes the TLS handshake itself, naming the
	// address's host as the server.
	o := fromYAML(t, withTLS(fmt.Sprintf(", cert_file: %q, key_file: %q", files.ClientCert, files.ClientKey)))
	tr := &tracker{conns: map[*trackedConn]struct{}{}, timeout: time.Second, tls: o.TLS}
	rc := redis.NewClient(&redis.Options{Addr: addr, Dialer: tr.dial, Username: "agentd", Password: "pw-of-agentd",
		TLSConfig: o.TLS, MaxRetries: -1})
	defer rc.Close()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the tracker's TLS dial = %v", err)
	}
	tr.mu.Lock()
	n := len(tr.conns)
	tr.mu.Unlock()
	if n != 1 {
		t.Errorf("the tracker holds %d connections, want 1", n)
	}
}
