package config

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParse feeds Parse arbitrary files. Parse must never panic; it either
// returns a configuration that passes its own validation or an error that
// starts with "config: " (several problems of the retry group are listed one
// a line). Run it with
//
//	go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 10m ./internal/config/
//
// The seeds below and testdata/fuzz/FuzzParse run with every go test.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		"\n\n  \t\n",
		"listen: {grpc: 127.0.0.1:9191, http: 127.0.0.1:8181}\n",
		"listen:\n  grpc: '[::1]:9090'\n  http: localhost:8080\n",
		"store:\n  backend: redis\n  redis: {addr: 127.0.0.1:6380, db: 2, key_prefix: \"x:\", timeout_ms: 200, lease_ms: 3000}\n",
		"retry:\n  enabled: true\n  max_retries: 3\n  base_delay_ms: 100\n  max_delay_ms: 0\n  model_fallback: false\n" +
			"  fallback_chains:\n    default: [sim/echo, sim/backup]\n  fallback_revert_policy: never\n  fallback_cooldown_ms: 1000\n",
		"retry: {fallback_chains: {default: [openai/gpt-5]}}\n",
		"auth:\n  tokens:\n    - token: a-long-enough-token-value\n      tenant: team-a\n      admin: true\n" +
			"listen: {grpc: 0.0.0.0:9090, http: 0.0.0.0:8080}\n",
		"auth: {tokens: [{token: short, tenant: a}]}\n",
		"auth: {tokens: [{token_env: AGENTD_FUZZ_UNSET_VAR, tenant: a}]}\n",
		"providers:\n  - name: anthropic\n    kind: anthropic\n    base_url: https://api.anthropic.com\n    max_tokens: 4096\n" +
			"    credentials:\n      - {id: team-a, api_key: sk-ant-xyz, banked_resets: 2, auto_redeem: true}\n" +
			"  - name: sim\n    kind: simulated\n    token_delay_ms: 20\n    models: [echo]\n",
		"providers: [{name: oai, kind: openai-responses, chain_responses: true, headers: {X-A: b}, auth_header: api-key}]\n",
		"providers: [{name: x, kind: gemini}]\n",
		"providers: [{name: Bad Name, kind: anthropic, base_url: 'ftp://x'}]\n",
		"sessions: {event_buffer: 128, max_prompt_bytes: 1024, max_sessions: 10, tool_result_timeout_ms: 5000}\n",
		"limits: {max_request_bytes: 4096, max_prompt_bytes: 1}\n",
		"limits: {max_request_bytes: 1048576, body_timeout_ms: 100, max_tools: 3, max_retries_cap: 2}\n",
		"metrics: {listen: 127.0.0.1:9100}\n",
		"http:\n  cors: {allowed_origins: ['HTTPS://App.Example:443', 'http://[::1]:3000', '*']}\n  sse_heartbeat_ms: 5000\n  ticket_ttl_ms: 1000\n",
		"http: {cors: {allowed_origins: ['http://a.example/', 'http://:80', 'http://a.example:99999']}}\n",
		"bogus: 1\n",
		"listen: {grpc: 127.0.0.1:1, bogus: 2}\n",
		"retry: {max_retries: lots}\n",
		"retry: {max_retries: 99999999999999999999}\n",
		"listen: [1, 2]\n",
		"- a\n- b\n",
		"listen: {grpc: 127.0.0.1:1}\n---\nlisten: {grpc: 0.0.0.0:1}\n",
		"---\n---\n",
		"providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key: '${ANTHROPIC_API_KEY}'}]}]\n",
		"auth: {tokens: [{token: '${TOKEN}', tenant: a}]}\n",
		"a: &x [*x]\n",
		"x: &a [1]\ny: *a\nlisten: *a\n",
		"listen: !!binary aGVsbG8=\n",
		"listen:\n\tgrpc: x\n",
		"{\"listen\": {\"grpc\": \"127.0.0.1:1\"}, \"store\": {\"backend\": \"memory\"}}",
		"store: {redis: {db: -1}}\n",
		"sessions: {event_buffer: 3}\n",
		"\xef\xbb\xbflisten: {grpc: 127.0.0.1:1}\n",
		"listen: {grpc: \"\xff\"}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return // the fuzzer's time is better spent on small files
		}
		c, err := Parse(bytes.NewReader(data))
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "config: ") {
				t.Fatalf("Parse(%q): error %q does not start with \"config: \"", data, msg)
			}
			if c != nil {
				t.Fatalf("Parse(%q): error %q with a configuration", data, msg)
			}
			return
		}
		if c == nil {
			t.Fatalf("Parse(%q): no configuration and no error", data)
		}
		// What Parse returns is complete and valid: the defaults are filled
		// in and the retry settings derive without error.
		if c.Listen.GRPC == "" || c.Listen.HTTP == "" || c.Store.Backend == "" || c.Sessions.EventBuffer < 16 ||
			c.Limits.MaxRequestBytes < 4096 || c.HTTP.SSEHeartbeatMs <= 0 || c.HTTP.TicketTTLMs <= 0 || !c.hasProvider("sim") {
			t.Fatalf("Parse(%q): incomplete configuration %+v", data, c)
		}
		if _, err := c.RetrySettings(); err != nil {
			t.Fatalf("Parse(%q): accepted, but RetrySettings: %v", data, err)
		}
		// Parsing is deterministic.
		c2, err := Parse(bytes.NewReader(data))
		if err != nil || c2 == nil {
			t.Fatalf("Parse(%q): accepted once, then %v", data, err)
		}
	})
}
