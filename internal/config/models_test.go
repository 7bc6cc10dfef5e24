package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/provider"
)

// Models are names or catalog mappings, mixed; the catalog carries what is
// given and nothing else.
func TestModelCatalog(t *testing.T) {
	c, err := Parse(strings.NewReader(`
providers:
  - name: anth
    kind: anthropic
    models:
      - claude-haiku-4-5
      - name: claude-sonnet-4-5
        context_window: 200000
        max_output_tokens: 64000
        supports_thinking: true
        supports_tools: true
        price: {input_per_mtok: 3, output_per_mtok: 15, cache_read_per_mtok: 0.3, cache_write_per_mtok: 3.75}
      - {name: claude-instant, supports_thinking: false}
    credentials:
      - {id: k1, api_key: one, account: acme}
      - {id: k2, api_key: two}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Providers[0]
	if got := p.ModelNames(); !slices.Equal(got, []string{"claude-haiku-4-5", "claude-sonnet-4-5", "claude-instant"}) {
		t.Fatalf("ModelNames = %q", got)
	}
	yes, no := true, false
	want := map[string]provider.ModelInfo{
		"claude-haiku-4-5": {Name: "claude-haiku-4-5"},
		"claude-sonnet-4-5": {Name: "claude-sonnet-4-5", ContextWindow: 200000, MaxOutputTokens: 64000,
			SupportsThinking: &yes, SupportsTools: &yes,
			Price: &provider.Price{InputPerMTok: 3, OutputPerMTok: 15, CacheReadPerMTok: 0.3, CacheWritePerMTok: 3.75}},
		"claude-instant": {Name: "claude-instant", SupportsThinking: &no},
	}
	if got := p.Catalog(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Catalog = %+v, want %+v", got, want)
	}
	if info := p.Catalog()["claude-instant"]; info.ThinkingSupported() {
		t.Errorf("claude-instant supports thinking")
	}
	if p.Credentials[0].Account != "acme" || p.Credentials[1].Account != "" {
		t.Errorf("accounts = %q, %q", p.Credentials[0].Account, p.Credentials[1].Account)
	}
	// The simulated provider's defaults are names.
	if got := c.Providers[1].ModelNames(); !slices.Equal(got, []string{"echo", "backup"}) {
		t.Errorf("sim models = %q", got)
	}
}

func TestModelCatalogErrorsNameTheKey(t *testing.T) {
	prov := func(models string) string {
		return "providers: [{name: a, kind: anthropic, models: " + models + "}]"
	}
	for _, tc := range []struct{ yaml, want string }{
		{prov("[{name: m, colour: red}]"), "providers[].models[].colour: unknown key (line 1)"},
		{prov("[{name: m, price: {input_per_mtok: 1, per_request: 2}}]"), "providers[].models[].price.per_request: unknown key (line 1)"},
		{prov("[{name: m, context_window: lots}]"), `providers[0].models[0].context_window: "lots" is not an integer (line 1)`},
		{prov("[x, {name: m, price: {output_per_mtok: cheap}}]"), `providers[0].models[1].price.output_per_mtok: "cheap" is not a number (line 1)`},
		{prov("[{name: m, supports_thinking: maybe}]"), `providers[0].models[0].supports_thinking: "maybe" is not true or false`},
		{prov("[[m]]"), "providers[0].models[0]: a list is not a mapping"},
		{prov("[{context_window: 5}]"), `providers[0].models[0].name: "" is not a model name`},
		{prov("[m, {name: m}]"), `providers[0].models[1]: model "m" is listed twice`},
		{prov("[{name: m, context_window: -1}]"), "providers[0].models[0].context_window: must be >= 0"},
		{prov("[{name: m, max_output_tokens: -1}]"), "providers[0].models[0].max_output_tokens: must be >= 0"},
		{prov("[{name: m, context_window: 1000, max_output_tokens: 2000}]"), "providers[0].models[0].max_output_tokens: 2000 is more than the context_window (1000)"},
		{prov("[{name: m, price: {input_per_mtok: -1}}]"), "providers[0].models[0].price.input_per_mtok: must be a number >= 0"},
		{"providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key: x, account: 'has space'}]}]", "providers[0].credentials[0].account"},
		{"providers: [{name: a, kind: anthropic, credentials: [{id: k, api_key: x, acount: o}]}]", "providers[].credentials[].acount: unknown key"},
		{"providers: [{name: a, kind: anthropic, encrypted_reasoning: true}]", "providers[0].encrypted_reasoning: only an openai-responses provider"},
		{"providers: [{name: a, kind: openai-responses, encrypted_reasoning: true, chain_responses: true}]", "providers[0].encrypted_reasoning: set encrypted_reasoning or chain_responses"},
	} {
		_, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error naming %q", tc.yaml, err, tc.want)
		}
	}
}
