package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// MaxMinReplicaAcks bounds store.redis.min_replica_acks.
const MaxMinReplicaAcks = 16

// Topology is the Redis deployment the configuration points at: "single"
// (store.redis.addr), "cluster" (store.redis.addrs with cluster: true) or
// "sentinel" (store.redis.addrs with master_name).
func (r *Redis) Topology() string {
	switch {
	case r.Cluster:
		return "cluster"
	case r.MasterName != "":
		return "sentinel"
	}
	return "single"
}

// finish validates the store.redis section, fills its defaults and reads
// the passwords from their environment variables (they never appear in an
// error).
func (r *Redis) finish() error {
	if r.Addr != "" && len(r.Addrs) > 0 {
		return fmt.Errorf("config: store.redis.addr: set addr (one server) or addrs (Cluster seed nodes, or Sentinels), not both")
	}
	if strings.Contains(r.Addr, ",") {
		return fmt.Errorf("config: store.redis.addr: %q is several addresses; addr is one server: list a Cluster's nodes in store.redis.addrs with store.redis.cluster: true", r.Addr)
	}
	switch {
	case r.Cluster && r.MasterName != "":
		return fmt.Errorf("config: store.redis.master_name: a Sentinel master and store.redis.cluster: true exclude each other")
	case r.Cluster && len(r.Addrs) == 0:
		return fmt.Errorf("config: store.redis.cluster: needs store.redis.addrs (the Cluster's seed nodes, host:port)")
	case r.MasterName != "" && len(r.Addrs) == 0:
		return fmt.Errorf("config: store.redis.master_name: needs store.redis.addrs (the Sentinels, host:port)")
	case len(r.Addrs) > 0 && !r.Cluster && r.MasterName == "":
		return fmt.Errorf("config: store.redis.addrs: set store.redis.cluster: true (Cluster seed nodes) or store.redis.master_name (Sentinels); one server is store.redis.addr")
	case r.Cluster && r.DB != 0:
		return fmt.Errorf("config: store.redis.db: must be 0 with store.redis.cluster: true (a Cluster has database 0 only), got %d", r.DB)
	}
	if r.Addr == "" && len(r.Addrs) == 0 {
		r.Addr = DefaultRedisAddr
	}
	if r.Addr != "" {
		if err := hostPort("store.redis.addr", r.Addr); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for i, a := range r.Addrs {
		key := "store.redis.addrs[" + strconv.Itoa(i) + "]"
		if err := hostPort(key, a); err != nil {
			return err
		}
		if seen[a] {
			return fmt.Errorf("config: %s: %q is listed twice", key, a)
		}
		seen[a] = true
	}
	if r.KeyPrefix == "" {
		r.KeyPrefix = DefaultKeyPrefix
	}
	if r.DB < 0 {
		return fmt.Errorf("config: store.redis.db: must be >= 0, got %d", r.DB)
	}
	if r.TimeoutMs < 0 || r.TimeoutMs > 10000 {
		return fmt.Errorf("config: store.redis.timeout_ms: must be between 0 and 10000, got %d", r.TimeoutMs)
	}
	if r.SyncIntervalMs < 0 || r.SyncIntervalMs > 60000 {
		return fmt.Errorf("config: store.redis.sync_interval_ms: must be between 0 and 60000, got %d", r.SyncIntervalMs)
	}
	if r.LeaseMs != 0 && (r.LeaseMs < 300 || r.LeaseMs > 600000) {
		return fmt.Errorf("config: store.redis.lease_ms: must be between 300 and 600000, got %d", r.LeaseMs)
	}
	if r.MinReplicaAcks < 0 || r.MinReplicaAcks > MaxMinReplicaAcks {
		return fmt.Errorf("config: store.redis.min_replica_acks: must be between 0 and %d, got %d", MaxMinReplicaAcks, r.MinReplicaAcks)
	}
	if err := envName("store.redis.secret_key_env", r.SecretKeyEnv); err != nil {
		return err
	}
	if env := r.SecretKeyEnv; env != "" {
		r.SecretKey = os.Getenv(env)
		if n := len(r.SecretKey); n != 16 && n != 24 && n != 32 {
			return fmt.Errorf("config: store.redis.secret_key_env: %s must hold a 16, 24 or 32-byte key, got %d bytes", env, n)
		}
	}
	if r.SentinelPasswordEnv != "" && r.MasterName == "" {
		return fmt.Errorf("config: store.redis.sentinel_password_env: only with Sentinel (store.redis.master_name)")
	}
	var err error
	if r.Password, err = secretFromEnv("store.redis.password_env", r.PasswordEnv); err != nil {
		return err
	}
	if r.SentinelPassword, err = secretFromEnv("store.redis.sentinel_password_env", r.SentinelPasswordEnv); err != nil {
		return err
	}
	if r.SentinelUsername != "" && r.MasterName == "" {
		return fmt.Errorf("config: store.redis.sentinel_username: only with Sentinel (store.redis.master_name)")
	}
	for _, u := range []struct{ key, v string }{{"username", r.Username}, {"sentinel_username", r.SentinelUsername}} {
		if strings.ContainsAny(u.v, " \t\r\n") {
			return fmt.Errorf("config: store.redis.%s: %q holds white space", u.key, u.v)
		}
	}
	return r.TLS.finish()
}

// finish checks store.redis.tls and builds its tls.Config: the files are
// read now, so a missing or malformed one stops agentd at start.
func (t *RedisTLS) finish() error {
	if !t.Enabled {
		for _, f := range []struct{ key, v string }{{"ca_file", t.CAFile}, {"cert_file", t.CertFile},
			{"key_file", t.KeyFile}, {"server_name", t.ServerName}} {
			if f.v != "" {
				return fmt.Errorf("config: store.redis.tls.%s: only with store.redis.tls.enabled: true", f.key)
			}
		}
		return nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return fmt.Errorf("config: store.redis.tls.ca_file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("config: store.redis.tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
	}
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return fmt.Errorf("config: store.redis.tls.cert_file: set cert_file and key_file together")
	case t.CertFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// The key's content never appears: LoadX509KeyPair's errors
			// name what is wrong, not what it read.
			return fmt.Errorf("config: store.redis.tls.cert_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	t.Config = c
	return nil
}

// secretFromEnv reads the secret held by the environment variable env
// names ("" when env is ""). An unset or empty variable is an error; the
// value never appears in one.
func secretFromEnv(key, env string) (string, error) {
	if err := envName(key, env); err != nil {
		return "", err
	}
	if env == "" {
		return "", nil
	}
	v := os.Getenv(env)
	if v == "" {
		return "", fmt.Errorf("config: %s: environment variable %s is empty or unset", key, env)
	}
	return v, nil
}

// hostPort checks a host:port address.
func hostPort(key, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || strings.ContainsAny(host, "/ ,") {
		return fmt.Errorf("config: %s: %q is not host:port", key, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("config: %s: %q has a bad port", key, addr)
	}
	return nil
}
