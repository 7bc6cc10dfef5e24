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
