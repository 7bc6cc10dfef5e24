package config

import (
	"strings"
	"testing"
)

func TestAzureProvider(t *testing.T) {
	c, err := Parse(strings.NewReader(`providers:
  - name: azure
    kind: azure-openai
    base_url: https://my-resource.openai.azure.com
    api_version: 2025-04-01-preview
    models: [{name: gpt-4o-prod}]
    credentials: [{id: a, api_key: "azkeyEXAMPLE"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, p := range c.Providers {
		if p.Name == "azure" {
			found = p.Kind == "azure-openai" && p.APIVersion == "2025-04-01-preview" && p.Models[0].Name == "gpt-4o-prod"
		}
	}
	if !found {
		t.Fatalf("providers = %+v", c.Providers)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"providers: [{name: a, kind: anthropic, api_version: 2024-10-21}]", "providers[0].api_version: only an azure-openai provider takes it"},
		{"providers: [{name: a, kind: azure-openai, models: [{name: d}]}]", "providers[0].base_url: an azure-openai provider needs its resource endpoint"},
		{"providers: [{name: a, kind: azure-openai, base_url: https://r.openai.azure.com}]", "providers[0].models: an azure-openai provider needs its deployments"},
		{"providers: [{name: a, kind: azure-openai, base_url: https://r.openai.azure.com, models: [{name: d}], api_version: v1}]", `providers[0].api_version: "v1" is not an api-version`},
		{"providers: [{name: a, kind: azure-openai, base_url: https://r.openai.azure.com, models: [{name: d}], chain_responses: true}]", "providers[0].chain_responses:"},
		{"providers: [{name: a, kind: azure-openai, base_url: https://r.openai.azure.com, models: [{name: d}], encrypted_reasoning: true}]", "providers[0].encrypted_reasoning: only an openai-responses provider takes it"},
	} {
		_, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestAzureEntraIDAndResponses(t *testing.T) {
	t.Setenv("AGENTD_TEST_ENTRA", "72f988bf-86f1-41af-91ab-2d7cd011db47:00000000-0000-0000-0000-00000000c11e:Xq8Q~secret:with:colons")
	c, err := Parse(strings.NewReader(`providers:
  - name: az
    kind: azure-openai
    base_url: https://my-resource.openai.azure.com
    api: responses
    entra_id: true
    token_url: https://login.example/{tenant}/oauth2/v2.0/token
    encrypted_reasoning: true
    models: [{name: gpt-5-prod}]
    credentials: [{id: sp, api_key_env: AGENTD_TEST_ENTRA}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Providers[0]
	if p.API != "responses" || !p.EntraID || p.TokenURL != "https://login.example/{tenant}/oauth2/v2.0/token" || !p.EncryptedReasoning {
		t.Fatalf("provider = %+v", p)
	}
	const az = "providers: [{name: a, kind: azure-openai, base_url: https://r.openai.azure.com, models: [{name: d}], "
	for _, tc := range []struct{ yaml, want string }{
		{az + "api: completions}]", `providers[0].api: "completions" is not an Azure OpenAI API (chat or responses)`},
		{az + "api: responses, api_version: 2024-10-21}]", "providers[0].api_version: 2024-10-21 has no Responses API"},
		{az + "entra_id: true, credentials: [{id: x, api_key: just-a-key}]}]", "providers[0].credentials[0]: with entra_id a secret is TENANT_ID:CLIENT_ID:CLIENT_SECRET"},
		{az + "entra_id: true, auth_header: api-key}]", "providers[0].auth_header: with entra_id the token goes in Authorization"},
		{az + "token_url: https://login.example/t}]", "providers[0].token_url: only a vertex provider or an azure-openai provider with entra_id takes it"},
		{"providers: [{name: a, kind: openai-chat, api: responses}]", "providers[0].api: only an azure-openai provider takes it"},
		{"providers: [{name: a, kind: openai-chat, entra_id: true}]", "providers[0].entra_id: only an azure-openai provider takes it"},
	} {
		_, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
