package config

import (
	"strings"
	"testing"
)

// prompt_cache and sticky_credentials default to on; false turns each off.
func TestPromptCacheKeys(t *testing.T) {
	c, err := Parse(strings.NewReader(`providers:
  - {name: a, kind: simulated}
  - {name: b, kind: simulated, prompt_cache: false, sticky_credentials: false}
  - {name: c, kind: simulated, prompt_cache: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	on := map[string][2]bool{}
	for _, p := range c.Providers {
		on[p.Name] = [2]bool{p.PromptCacheOn(), p.Sticky()}
	}
	if on["a"] != [2]bool{true, true} || on["b"] != [2]bool{false, false} || on["c"] != [2]bool{true, true} {
		t.Errorf("prompt cache, sticky = %v", on)
	}
	if _, err := Parse(strings.NewReader("providers: [{name: a, kind: simulated, prompt_cache: sometimes}]\n")); err == nil ||
		!strings.Contains(err.Error(), "prompt_cache") {
		t.Errorf("a bad prompt_cache: %v, want an error naming it", err)
	}
}

func TestTelemetryKeys(t *testing.T) {
	c, err := Parse(strings.NewReader("telemetry: {otlp: {endpoint: 127.0.0.1:4317, insecure: true}, capture_content: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Telemetry.OTLP; o.Endpoint != "127.0.0.1:4317" || !o.Insecure || !c.Telemetry.CaptureContent || c.Telemetry.ServiceName != "agentd" {
		t.Errorf("telemetry = %+v", c.Telemetry)
	}
	if d, err := Parse(strings.NewReader("")); err != nil || d.Telemetry.OTLP.Endpoint != "" {
		t.Errorf("default telemetry = %+v, %v: want off", d.Telemetry, err)
	}
	for yaml, want := range map[string]string{
		"telemetry: {otlp: {endpoint: collector}}\n": "telemetry.otlp.endpoint",
		"telemetry: {otlp: {endpoit: x:1}}\n":        "endpoit",
	} {
		if _, err := Parse(strings.NewReader(yaml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %s", yaml, err, want)
		}
	}
}
