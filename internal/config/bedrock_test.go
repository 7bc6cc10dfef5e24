package config

import (
	"strings"
	"testing"
)

func TestBedrockProvider(t *testing.T) {
	c, err := Parse(strings.NewReader(`providers:
  - name: aws
    kind: bedrock
    region: eu-west-3
    base_url: https://bedrock-runtime.eu-west-3.amazonaws.com
    credentials: [{id: a, api_key: "AKIAEXAMPLE:secretEXAMPLE"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, p := range c.Providers {
		if p.Name == "aws" {
			found = p.Kind == "bedrock" && p.Region == "eu-west-3" && p.Credentials[0].APIKey == "AKIAEXAMPLE:secretEXAMPLE"
		}
	}
	if !found {
		t.Fatalf("providers = %+v", c.Providers)
	}
	_, err = Parse(strings.NewReader("providers: [{name: a, kind: anthropic, region: us-east-1}]"))
	if err == nil || !strings.Contains(err.Error(), "providers[0].region: only a bedrock provider takes it") {
		t.Fatalf("region on anthropic: %v", err)
	}
}
