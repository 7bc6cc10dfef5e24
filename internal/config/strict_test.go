package config

import (
	"strings"
	"testing"
)

// A token long enough for auth.tokens.
const testToken = "a-long-enough-token-value"

// A second YAML document is refused: it used to be dropped, and an auth:
// there left agentd open.
func TestSecondDocumentIsRefused(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"listen: {http: 127.0.0.1:8080}\n---\nauth:\n  tokens: [{token: " + testToken + ", tenant: a}]\n",
			`config: line 2: a second YAML document ("---"); agentd reads one`},
		// An empty document after a final --- is refused too.
		{"listen: {http: 127.0.0.1:8080}\n---\n", `config: line 2: a second YAML document ("---"); agentd reads one`},
		{"listen: {http: 127.0.0.1:8080}\n--- # more\n# nothing\n", `config: line 2: a second YAML document ("---"); agentd reads one`},
		{"---\n---\nauth: {tokens: [{token: " + testToken + ", tenant: a}]}\n", `config: line 2: a second YAML document ("---"); agentd reads one`},
		{"sessions: {event_buffer: 64}\n...\n---\nsessions: {event_buffer: 128}\n", `config: line 3: a second YAML document ("---"); agentd reads one`},
		{"sessions: {event_buffer: 64}\n...\nsessions: {event_buffer: 128}\n", `config: after the first YAML document: `},
		{"sessions: {event_buffer: 64}\n---\nsessions: [\n", `config: after the first YAML document: `},
	} {
		c, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want the error %q", tc.yaml, c, err, tc.want)
		}
	}
	// One document, with or without its markers, is read.
	for _, y := range []string{
		"---\nsessions: {event_buffer: 64}\n",
		"sessions: {event_buffer: 64}\n...\n",
		"--- {sessions: {event_buffer: 64}}\n",
		"# a comment\nsessions: {event_buffer: 64}\n# another\n",
	} {
		c, err := Parse(strings.NewReader(y))
		if err != nil || c.Sessions.EventBuffer != 64 {
			t.Errorf("Parse(%q) = %v; want event_buffer 64", y, err)
		}
	}
	for _, y := range []string{"---\n", "# nothing\n"} {
		if _, err := Parse(strings.NewReader(y)); err != nil {
			t.Errorf("Parse(%q) = %v; want the defaults", y, err)
		}
	}
}

// A ${VAR} or $VAR in a secret is not expanded: Parse refuses it and points
// at the *_env key instead of using the reference as the secret.
func TestUnexpandedSecretsAreRefused(t *testing.T) {
	t.Setenv("ANTHROPIC_KEY", "sk-ant-the-real-key")
	t.Setenv("AGENTD_TOKEN_TEAM_A", testToken)
	cred := func(apiKey string) string {
		return "providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key: '" + apiKey + "'}]}]\n"
	}
	tok := func(token string) string {
		return "auth: {tokens: [{token: '" + token + "', tenant: a}]}\n"
	}
	for _, tc := range []struct{ yaml, want string }{
		{cred("${ANTHROPIC_KEY}"),
			`config: providers[0].credentials[0].api_key: "${ANTHROPIC_KEY}" is not expanded; put the variable's name in api_key_env (api_key_env: ANTHROPIC_KEY)`},
		{cred("${ANTHROPIC_KEY:-sk-default}"),
			`config: providers[0].credentials[0].api_key: "${ANTHROPIC_KEY:-sk-default}" is not expanded; put the variable's name in api_key_env (api_key_env: ANTHROPIC_KEY)`},
		{cred("$ANTHROPIC_KEY"),
			`config: providers[0].credentials[0].api_key: "$ANTHROPIC_KEY" is not expanded; put the variable's name in api_key_env (api_key_env: ANTHROPIC_KEY)`},
		{tok("${AGENTD_TOKEN_TEAM_A}"),
			`config: auth.tokens[0].token: "${AGENTD_TOKEN_TEAM_A}" is not expanded; put the variable's name in token_env (token_env: AGENTD_TOKEN_TEAM_A)`},
		{tok("$AGENTD_TOKEN_TEAM_A"),
			`config: auth.tokens[0].token: "$AGENTD_TOKEN_TEAM_A" is not expanded; put the variable's name in token_env (token_env: AGENTD_TOKEN_TEAM_A)`},
		// Not wholly a reference: the value is not shown.
		{tok("Bearer ${AGENTD_TOKEN_TEAM_A}"),
			`config: auth.tokens[0].token: holds a ${VARIABLE}, which is not expanded; put the variable's name in token_env`},
		{tok("$agentdTokenTeamA"),
			`config: auth.tokens[0].token: looks like a $VARIABLE, which is not expanded; put the variable's name in token_env`},
		// An *_env key holds a name, not a reference.
		{"providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key_env: $ANTHROPIC_KEY}]}]\n",
			`config: providers[0].credentials[0].api_key_env: "$ANTHROPIC_KEY": write the variable's name, without "$" (api_key_env: ANTHROPIC_KEY)`},
		{"auth: {tokens: [{token_env: '${AGENTD_TOKEN_TEAM_A}', tenant: a}]}\n",
			`config: auth.tokens[0].token_env: "${AGENTD_TOKEN_TEAM_A}": write the variable's name, without "$" (token_env: AGENTD_TOKEN_TEAM_A)`},
		{"store: {redis: {secret_key_env: $KEY}}\n", `config: store.redis.secret_key_env: "$KEY"`},
		{"http: {ticket_key_env: '${KEY}'}\n", `config: http.ticket_key_env: "${KEY}"`},
	} {
		c, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || err.Error() != tc.want && !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, %v;\nwant the error %q", tc.yaml, c, err, tc.want)
		}
	}
	// A secret that merely holds a "$" is a secret.
	for _, y := range []string{cred("sk-ant-a$b-c"), tok("p4ss$w0rd-long-enough"), tok("abc${def-long-enough")} {
		if _, err := Parse(strings.NewReader(y)); err != nil {
			t.Errorf("Parse(%q) = %v", y, err)
		}
	}
}

// No error shows a secret's value.
func TestErrorsDoNotShowSecrets(t *testing.T) {
	const secret = "sk-SECRETMARKER-0123456789"
	t.Setenv("AGENTD_TEST_SECRET", secret)
	for _, y := range []string{
		"providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key: " + secret + ", api_key_env: AGENTD_TEST_SECRET}]}]",
		"providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key: '" + secret + "${X}'}]}]",
		"providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key: " + secret + ", banked_resets: -1}]}]",
		"providers: [{name: a, kind: anthropic, credentials: [{id: k, banked_resets: " + secret + "}]}]",
		"auth: {tokens: [{token: " + secret + ", token_env: AGENTD_TEST_SECRET, tenant: a}]}",
		"auth: {tokens: [{token: '" + secret + "${X}', tenant: a}]}",
		"auth: {tokens: [{token: '$X" + secret + "', tenant: ''}]}",
		"auth: {tokens: [{token: " + secret + ", tenant: a}, {token_env: AGENTD_TEST_SECRET, tenant: b}]}",
		"auth: {tokens: [{token: " + secret + ", tenant: 'bad tenant'}]}",
		"auth: {tokens: [{token: " + secret + ", tenant: a, admin: " + secret + "}]}",
		"auth: {tokens: [{token: [" + secret + "], tenant: a}]}",
		"auth: {tokens: [{token: short" + secret[:5] + ", tenant: a}]}",
	} {
		_, err := Parse(strings.NewReader(y))
		if err == nil {
			t.Errorf("Parse(%q) accepted", y)
		} else if strings.Contains(err.Error(), "SECRETMARKER") {
			t.Errorf("Parse(%q) = %v: shows the secret", y, err)
		}
	}
}

// A type error names its key.
func TestTypeErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"retry:\n  max_retries: ten\n", `config: retry.max_retries: "ten" is not an integer (line 2)`},
		{"retry: {max_retries: lots}", `config: retry.max_retries: "lots" is not an integer (line 1)`},
		{"retry: {max_retries: abcdefghijklmnop}", `config: retry.max_retries: "abcdefg..." is not an integer (line 1)`},
		{"retry: {enabled: perhaps}", `config: retry.enabled: "perhaps" is not true or false (line 1)`},
		{"retry: {fallback_chains: {default: sim/echo}}", `config: retry.fallback_chains.default: "sim/echo" is not a list (line 1)`},
		{"listen: [a, b]", `config: listen: a list is not a mapping (line 1)`},
		{"providers: {name: a}", `config: providers: a mapping is not a list (line 1)`},
		{"- a\n- b\n", `config: the configuration: a list is not a mapping (line 1)`},
		{"providers:\n  - name: a\n    kind: anthropic\n    credentials:\n      - id: k\n        banked_resets: many\n",
			`config: providers[0].credentials[0].banked_resets: "many" is not an integer (line 6)`},
		{"providers:\n  - {name: a, kind: anthropic, headers: {'X Y': [1]}}\n",
			`config: providers[0].headers["X Y"]: a list is not a string (line 2)`},
		// A string field holding the same text, and an unknown key, are
		// not taken for the key in error.
		{"providers: [{name: x, kind: anthropic, max_tokens: x}]", `config: providers[0].max_tokens: "x" is not an integer (line 1)`},
		// Several errors, each with its key, in document order.
		{"retry:\n  max_retries: ten\n  base_delay_ms: soon\n",
			`config: retry.max_retries: "ten" is not an integer (line 2); retry.base_delay_ms: "soon" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 3)`},
		{"{retry: {max_retries: x}, limits: {max_tools: x}}",
			`config: retry.max_retries: "x" is not an integer (line 1); limits.max_tools: "x" is not an integer (line 1)`},
		{"retry: {bogus: x, max_retries: x}",
			`config: retry.bogus: unknown key (line 1); retry.max_retries: "x" is not an integer (line 1)`},
	} {
		_, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) = %v;\nwant the error %q", tc.yaml, err, tc.want)
		}
	}
}

// The listen flags obey the file's rules.
func TestSetListen(t *testing.T) {
	c, err := Parse(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ grpc, http, want string }{
		{"", "192.0.2.2:0", `config: listen.http: "192.0.2.2:0" is not a loopback address; without auth.tokens agentd listens on loopback only`},
		{"0.0.0.0:9090", "", `config: listen.grpc: "0.0.0.0:9090" is not a loopback address`},
		{"[::]:9090", "127.0.0.1:0", `config: listen.grpc: "[::]:9090" is not a loopback address`},
		{"", ":8080", `config: listen.http: ":8080" is not a loopback address`},
		{"nonsense", "", `config: listen.grpc: "nonsense" is not host:port`},
	} {
		err := c.SetListen(tc.grpc, tc.http)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("SetListen(%q, %q) = %v; want %q", tc.grpc, tc.http, err, tc.want)
		}
		if c.Listen.GRPC != DefaultGRPCAddr || c.Listen.HTTP != DefaultHTTPAddr {
			t.Errorf("SetListen(%q, %q) refused, but listen is now %+v", tc.grpc, tc.http, c.Listen)
		}
	}
	if err := c.SetListen("[::1]:0", "localhost:0"); err != nil || c.Listen.GRPC != "[::1]:0" || c.Listen.HTTP != "localhost:0" {
		t.Errorf("SetListen to loopback = %v, listen %+v", err, c.Listen)
	}
	if err := c.SetListen("", ""); err != nil || c.Listen.GRPC != "[::1]:0" {
		t.Errorf("SetListen of nothing = %v, listen %+v", err, c.Listen)
	}

	// With auth.tokens any interface is allowed, still as host:port.
	c, err = Parse(strings.NewReader("auth: {tokens: [{token: " + testToken + ", tenant: a}]}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetListen("0.0.0.0:9090", ":8080"); err != nil || c.Listen.GRPC != "0.0.0.0:9090" || c.Listen.HTTP != ":8080" {
		t.Errorf("SetListen with tokens = %v, listen %+v", err, c.Listen)
	}
	if err := c.SetListen("", "8080"); err == nil || !strings.Contains(err.Error(), `listen.http: "8080" is not host:port`) {
		t.Errorf("SetListen(\"\", \"8080\") = %v", err)
	}
}
