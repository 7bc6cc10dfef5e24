package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c, err := Parse(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.GRPC != "127.0.0.1:9090" || c.Listen.HTTP != "127.0.0.1:8080" || c.Store.Backend != "memory" {
		t.Fatalf("defaults = %+v", c)
	}
	if len(c.Providers) != 1 || c.Providers[0].Name != "sim" || c.Providers[0].Kind != "simulated" {
		t.Fatalf("providers = %+v", c.Providers)
	}
	s, err := c.RetrySettings()
	if err != nil {
		t.Fatal(err)
	}
	if !s.Enabled || s.MaxRetries != 10 || s.BaseDelay != 500*time.Millisecond || s.MaxDelay != 300*time.Second ||
		!s.ModelFallback || s.FallbackRevertPolicy != "cooldown-expiry" {
		t.Fatalf("retry defaults = %+v", s)
	}
	if l := c.Limits; l.MaxStreamsPerTenant != 1000 || l.MaxCredentialsPerTenant != 100 || l.MaxSessionsPerTenant != 1000 || l.MaxHistoryBytes != 64<<20 {
		t.Fatalf("limits defaults = %+v", l)
	}
}

func TestFullConfig(t *testing.T) {
	t.Setenv("TEST_TOKEN_A", "a-long-enough-token-value")
	t.Setenv("TEST_ANTHROPIC_KEY", "sk-ant-xyz")
	c, err := Parse(strings.NewReader(`
listen:
  grpc: 127.0.0.1:9191
  http: 127.0.0.1:8181
store:
  backend: redis
  redis: {addr: 127.0.0.1:6380, db: 2, key_prefix: "x:"}
retry:
  enabled: true
  max_retries: 3
  base_delay_ms: 100
  max_delay_ms: 0
  model_fallback: false
  fallback_chains:
    default: [anthropic/claude-sonnet-4-5, sim/echo]
  fallback_revert_policy: never
auth:
  tokens:
    - token_env: TEST_TOKEN_A
      tenant: team-a
providers:
  - name: anthropic
    kind: anthropic
    base_url: https://api.anthropic.com
    credentials:
      - id: team-a
        api_key_env: TEST_ANTHROPIC_KEY
      - id: team-b
        api_key: "inline"
  - name: sim
    kind: simulated
    token_delay_ms: 20
sessions:
  event_buffer: 128
`))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.RetrySettings()
	if s.MaxRetries != 3 || s.BaseDelay != 100*time.Millisecond || s.MaxDelay != 0 || s.ModelFallback || s.FallbackRevertPolicy != "never" {
		t.Fatalf("retry = %+v", s)
	}
	if c.Auth.Tokens[0].Token != "a-long-enough-token-value" || c.Providers[0].Credentials[0].APIKey != "sk-ant-xyz" {
		t.Fatalf("env values not read: %+v", c)
	}
	if c.Store.Redis.DB != 2 || c.Sessions.EventBuffer != 128 || c.Providers[1].TokenDelayMs != 20 {
		t.Fatalf("config = %+v", c)
	}
}

func TestRetryBudget(t *testing.T) {
	c, err := Parse(strings.NewReader("retry: {budget: {max_tokens: 100}}"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := c.RetryBudget(); b.MaxTokens != 100 || b.TokenRatio != 0.1 || !b.Enabled() {
		t.Fatalf("budget = %+v", b)
	}
	c, err = Parse(strings.NewReader("retry: {budget: {max_tokens: 10, token_ratio: 0.5}}"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := c.RetryBudget(); b.MaxTokens != 10 || b.TokenRatio != 0.5 {
		t.Fatalf("budget = %+v", b)
	}
	c, _ = Parse(strings.NewReader(""))
	if b, _ := c.RetryBudget(); b.Enabled() {
		t.Fatalf("a budget by default: %+v", b)
	}
	if s, _ := c.RetrySettings(); s.OverflowFallback {
		t.Fatal("overflow_fallback on by default")
	}
	c, err = Parse(strings.NewReader("retry: {overflow_fallback: true}"))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := c.RetrySettings(); !s.OverflowFallback {
		t.Fatal("retry.overflow_fallback not read")
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"bogus: 1", "bogus: unknown key"},
		{"listen: {grpc: 127.0.0.1:1, bogus: 2}", "listen.bogus: unknown key"},
		{"retry: {max_retriez: 2}", "retry.max_retriez: unknown key"},
		{"telemetry: {otlp: {endpoint: 127.0.0.1:4317, tls: true}}", "telemetry.otlp.tls: unknown key"},
		{"telemetry: {service: x}", "telemetry.service: unknown key"},
		{"providers: [{name: a, kind: anthropic, colour: red}]", "providers[].colour: unknown key"},
		{"listen: {grpc: nonsense}", "listen.grpc"},
		{"store: {backend: etcd}", "store.backend"},
		{"retry: {max_retries: -1}", "max_retries"},
		{"retry: {max_retries: lots}", "line 1"},
		{"retry: {base_delay_ms: -5}", "base_delay_ms"},
		{"retry: {fallback_revert_policy: sometimes}", "fallback_revert_policy"},
		{"retry: {fallback_chains: {default: [openai/gpt-5]}}", "retry.fallback_chains.default[0]"},
		{"providers: [{name: x, kind: watsonx}]", "providers[0].kind"},
		{"providers: [{name: x, kind: anthropic}, {name: x, kind: anthropic}]", "providers[1].name"},
		{"providers: [{name: Bad Name, kind: anthropic}]", "providers[0].name"},
		{"providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key_env: AGENTD_TEST_UNSET_VAR}]}]", "providers[0].credentials[0].api_key_env"},
		{"auth: {tokens: [{token: short, tenant: a}]}", "auth.tokens[0].token"},
		{"auth: {tokens: [{token: a-long-enough-token-value, tenant: ''}]}", "auth.tokens[0].tenant"},
		{"sessions: {event_buffer: 3}", "sessions.event_buffer"},
		{"listen: {grpc: 0.0.0.0:9090}", "listen.grpc: \"0.0.0.0:9090\" is not a loopback address"},
		{"listen: {http: ':8080'}", "listen.http"},
		{"retry: {budget: {token_ratio: 0.1}}", "retry.budget.max_tokens must be in [1, 1000], got 0"},
		{"retry: {budget: {max_tokens: 10, token_ratio: 0}}", "retry.budget.token_ratio"},
		{"retry: {budget: {max_tokens: 10, tokens: 3}}", "retry.budget.tokens: unknown key"},
		{"limits: {max_streams_per_tenant: -1}", "config: limits.max_streams_per_tenant: must be > 0, got -1"},
		{"limits: {max_credentials_per_tenant: -2}", "config: limits.max_credentials_per_tenant: must be > 0, got -2"},
		{"limits: {max_history_bytes: -3}", "config: limits.max_history_bytes: must be > 0, got -3"},
	} {
		_, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error naming %q", tc.yaml, err, tc.want)
		}
	}
}

// A fallback chain naming a model its provider does not serve stops
// start-up, naming the key (it used to start, then fail every
// CreateSession with a 400 that blamed the client).
func TestFallbackChainModelsAreChecked(t *testing.T) {
	_, err := Parse(strings.NewReader("retry: {fallback_chains: {default: [sim/nope]}}\n"))
	if err == nil || !strings.Contains(err.Error(), `retry.fallback_chains.default[0]: provider "sim" has no model "nope" (its models: echo, backup)`) {
		t.Fatalf("Parse = %v", err)
	}
	if _, err := Parse(strings.NewReader("retry: {fallback_chains: {default: [sim/backup]}}\n")); err != nil {
		t.Fatalf("a served model: %v", err)
	}
	// A provider without a model list serves any model.
	t.Setenv("AGENTD_TEST_CHAIN_KEY", "sk-test-0123456789")
	if _, err := Parse(strings.NewReader("providers: [{name: up, kind: anthropic, credentials: [{id: k, api_key_env: AGENTD_TEST_CHAIN_KEY}]}]\nretry: {fallback_chains: {default: [up/any-model]}}\n")); err != nil {
		t.Fatalf("a provider without models: %v", err)
	}
}

func TestProviderPacing(t *testing.T) {
	c, err := Parse(strings.NewReader(`providers:
  - {name: a, kind: anthropic}
  - {name: b, kind: anthropic, pacing: false}
  - {name: c, kind: anthropic, auto_redeem: true}
  - {name: d, kind: anthropic, credentials: [{id: k, api_key: sk-0123456789abcdef, auto_redeem: true}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false, false} {
		if got := c.Providers[i].Paces(); got != want {
			t.Errorf("providers[%d] (%s).Paces() = %v, want %v", i, c.Providers[i].Name, got, want)
		}
	}
}

// Every section type of the configuration has its key path, so that an
// unknown key anywhere is named in full ("store.redis.tls.sni").
func TestEverySectionHasItsPath(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeFor[Config]().PkgPath() || seen[typ] {
			return
		}
		seen[typ] = true
		if _, ok := sections[typ.Name()]; !ok {
			t.Errorf("config.%s has no key path in sections", typ.Name())
		}
		for f := range typ.Fields() {
			if tag := f.Tag.Get("yaml"); tag != "-" && f.IsExported() {
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[Config]())
}
