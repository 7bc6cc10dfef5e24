package config

import (
	"strings"
	"testing"
)

func TestVertexProvider(t *testing.T) {
	t.Setenv("AGENTD_TEST_SA_KEY", `{"type": "service_account", "project_id": "p"}`)
	c, err := Parse(strings.NewReader(`providers:
  - name: vx
    kind: vertex
    project: my-project-123
    location: europe-west4
    token_url: https://oauth2.googleapis.com/token
    credentials: [{id: sa, api_key_env: AGENTD_TEST_SA_KEY}]
  - name: adc
    kind: vertex
`))
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, p := range c.Providers {
		switch p.Name {
		case "vx":
			if p.Kind == "vertex" && p.Project == "my-project-123" && p.Location == "europe-west4" &&
				p.TokenURL == "https://oauth2.googleapis.com/token" && strings.Contains(p.Credentials[0].APIKey, "service_account") {
				found++
			}
		case "adc":
			if len(p.Credentials) == 0 {
				found++
			}
		}
	}
	if found != 2 {
		t.Fatalf("providers = %+v", c.Providers)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"providers: [{name: a, kind: gemini, project: my-project}]", "providers[0].project: only a vertex provider takes it"},
		{"providers: [{name: a, kind: bedrock, location: us-central1}]", "providers[0].location: only a vertex provider takes it"},
		{"providers: [{name: a, kind: gemini, token_url: https://x.example/token}]", "providers[0].token_url: only a vertex provider or an azure-openai provider with entra_id takes it"},
		{"providers: [{name: a, kind: vertex, token_url: ftp://x}]", `providers[0].token_url: "ftp://x" is not an http(s) URL`},
		{"providers: [{name: a, kind: vertex, project: My_Project}]", `providers[0].project: "My_Project" is not a Google Cloud project id`},
		{"providers: [{name: a, kind: vertex, location: US Central}]", `providers[0].location: "US Central" is not a Google Cloud location`},
		{"providers: [{name: a, kind: vertex, region: us-central1}]", "providers[0].region: only a bedrock provider takes it"},
		{"providers: [{name: a, kind: vertex, chain_responses: true}]", "providers[0]: chain_responses and encrypted_reasoning are OpenAI Responses options"},
	} {
		_, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
