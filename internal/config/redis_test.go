package config

import (
	"strings"
	"testing"
)

func TestRedisTopologies(t *testing.T) {
	t.Setenv("T_REDIS_PASSWORD", "pw-of-redis")
	t.Setenv("T_SENTINEL_PASSWORD", "pw-of-sentinel")
	for _, tc := range []struct {
		yaml     string
		topology string
		check    func(r Redis) bool
	}{
		{`{}`, "single", func(r Redis) bool { return r.Addr == DefaultRedisAddr && len(r.Addrs) == 0 }},
		{`{addr: "redis:6380", db: 3}`, "single", func(r Redis) bool { return r.Addr == "redis:6380" && r.DB == 3 }},
		{`{addrs: [a:7000, b:7000], cluster: true, password_env: T_REDIS_PASSWORD}`, "cluster",
			func(r Redis) bool { return r.Addr == "" && len(r.Addrs) == 2 && r.Password == "pw-of-redis" }},
		{`{addrs: [s1:26379, s2:26379, s3:26379], master_name: mymaster, password_env: T_REDIS_PASSWORD, sentinel_password_env: T_SENTINEL_PASSWORD, min_replica_acks: 1}`,
			"sentinel", func(r Redis) bool {
				return r.MasterName == "mymaster" && r.Password == "pw-of-redis" && r.SentinelPassword == "pw-of-sentinel" && r.MinReplicaAcks == 1
			}},
	} {
		c, err := Parse(strings.NewReader("store: {backend: redis, redis: " + tc.yaml + "}"))
		if err != nil {
			t.Errorf("%s: %v", tc.yaml, err)
			continue
		}
		r := c.Store.Redis
		if r.Topology() != tc.topology || !tc.check(r) {
			t.Errorf("%s: topology %s, %+v", tc.yaml, r.Topology(), r)
		}
	}
}

func TestRedisErrorsNameTheKey(t *testing.T) {
	t.Setenv("T_REDIS_PASSWORD", "pw-of-redis")
	t.Setenv("T_EMPTY", "")
	for _, tc := range []struct{ yaml, want string }{
		{`{addr: a:1, addrs: [b:1], cluster: true}`, "store.redis.addr: set addr (one server) or addrs"},
		{`{addr: "a:1,b:1"}`, "store.redis.addr: \"a:1,b:1\" is several addresses"},
		{`{addrs: [a:1], cluster: true, master_name: m}`, "store.redis.master_name: a Sentinel master and store.redis.cluster: true exclude each other"},
		{`{master_name: m}`, "store.redis.master_name: needs store.redis.addrs"},
		{`{cluster: true}`, "store.redis.cluster: needs store.redis.addrs"},
		{`{addrs: [a:1]}`, "store.redis.addrs: set store.redis.cluster: true"},
		{`{addrs: [a:1], cluster: true, db: 1}`, "store.redis.db: must be 0 with store.redis.cluster: true"},
		{`{addrs: [a:1, "nope"], cluster: true}`, "store.redis.addrs[1]: \"nope\" is not host:port"},
		{`{addrs: [a:1, a:1], cluster: true}`, "store.redis.addrs[1]: \"a:1\" is listed twice"},
		{`{addr: "a:99999"}`, "store.redis.addr: \"a:99999\" has a bad port"},
		{`{min_replica_acks: -1}`, "store.redis.min_replica_acks: must be between 0 and 16"},
		{`{password_env: T_UNSET_VARIABLE}`, "store.redis.password_env: environment variable T_UNSET_VARIABLE is empty or unset"},
		{`{password_env: $T_REDIS_PASSWORD}`, "store.redis.password_env: \"$T_REDIS_PASSWORD\": write the variable's name"},
		{`{addrs: [a:1], master_name: m, sentinel_password_env: T_EMPTY}`, "store.redis.sentinel_password_env: environment variable T_EMPTY is empty or unset"},
		{`{sentinel_password_env: T_REDIS_PASSWORD}`, "store.redis.sentinel_password_env: only with Sentinel"},
		{`{sentinel_username: s}`, "store.redis.sentinel_username: only with Sentinel"},
		{`{username: "a b"}`, "store.redis.username: \"a b\" holds white space"},
		{`{tls: {ca_file: /x.pem}}`, "store.redis.tls.ca_file: only with store.redis.tls.enabled: true"},
		{`{tls: {enabled: true, ca_file: /nonexistent/ca.pem}}`, "store.redis.tls.ca_file: open /nonexistent/ca.pem"},
		{`{tls: {enabled: true, cert_file: /x.pem}}`, "store.redis.tls.cert_file: set cert_file and key_file together"},
		{`{tls: {enabled: true, cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}}`, "store.redis.tls.cert_file: open /nonexistent/c.pem"},
		{`{tls: {enabled: true, sni: x}}`, "store.redis.tls.sni: unknown key"},
	} {
		_, err := Parse(strings.NewReader("store: {backend: redis, redis: " + tc.yaml + "}"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.yaml, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "pw-of-redis") {
			t.Errorf("%s: the password is in the error %q", tc.yaml, err)
		}
	}
}
