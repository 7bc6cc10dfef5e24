package config

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentd/agentd/internal/provider"
)

// Model is one model of a provider (providers[].models[]): its name and
// what the model catalog knows of it. In the file each is a name
//
//	models: [claude-sonnet-4-5, claude-haiku-4-5]
//
// or a mapping, which only name is required of (the two mix):
//
//	models:
//	  - name: claude-sonnet-4-5
//	    context_window: 200000
//	    max_output_tokens: 64000
//	    supports_thinking: true
//	    supports_tools: true
//	    price: {input_per_mtok: 3, output_per_mtok: 15, cache_read_per_mtok: 0.3, cache_write_per_mtok: 3.75}
//	  - claude-haiku-4-5
//
// Unknown keys are errors. What is not given is unknown, and nothing is
// checked against it. max_output_tokens bounds a session's
// params.max_tokens; supports_thinking: false refuses params.thinking.
type Model struct {
	Name             string      `yaml:"name"`
	ContextWindow    int         `yaml:"context_window"`
	MaxOutputTokens  int         `yaml:"max_output_tokens"`
	SupportsThinking *bool       `yaml:"supports_thinking"`
	SupportsTools    *bool       `yaml:"supports_tools"`
	Price            *ModelPrice `yaml:"price"`
}

// ModelPrice is a model's price per million tokens (USD).
type ModelPrice struct {
	InputPerMTok      float64 `yaml:"input_per_mtok"`
	OutputPerMTok     float64 `yaml:"output_per_mtok"`
	CacheReadPerMTok  float64 `yaml:"cache_read_per_mtok"`
	CacheWritePerMTok float64 `yaml:"cache_write_per_mtok"`
}

// UnmarshalYAML reads a model given as a name or as a mapping, refusing
// unknown keys (the decoder's own check does not reach inside a type that
// decodes itself).
func (m *Model) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			*m = Model{}
			return nil
		}
		*m = Model{Name: n.Value}
		return nil
	case yaml.MappingNode:
	default:
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s into config.Model", n.Line, n.ShortTag())}}
	}
	var errs []string
	errs = append(errs, unknownKeys(n, "Model", []string{"name", "context_window", "max_output_tokens", "supports_thinking", "supports_tools", "price"})...)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if v := n.Content[i+1]; n.Content[i].Value == "price" && v.Kind == yaml.MappingNode {
			errs = append(errs, unknownKeys(v, "ModelPrice", []string{"input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_write_per_mtok"})...)
		}
	}
	type plain Model
	var p plain
	if err := n.Decode(&p); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return err
		}
		errs = append(errs, te.Errors...)
	}
	*m = Model(p)
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

// unknownKeys words each key of mapping n that is not in known as the
// decoder words an unknown field of typ (cleanYAMLError names its key).
func unknownKeys(n *yaml.Node, typ string, known []string) []string {
	var out []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		found := false
		for _, name := range known {
			found = found || k.Value == name
		}
		if !found {
			out = append(out, fmt.Sprintf("line %d: field %s not found in type config.%s", k.Line, k.Value, typ))
		}
	}
	return out
}

// ModelNames are the names of the provider's models, in order.
func (p Provider) ModelNames() []string {
	out := make([]string, 0, len(p.Models))
	for _, m := range p.Models {
		out = append(out, m.Name)
	}
	return out
}

// Catalog is the provider's model catalog, by model name.
func (p Provider) Catalog() map[string]provider.ModelInfo {
	if len(p.Models) == 0 {
		return nil
	}
	out := make(map[string]provider.ModelInfo, len(p.Models))
	for _, m := range p.Models {
		out[m.Name] = m.Info()
	}
	return out
}

// Info is m as the session engine sees it.
func (m Model) Info() provider.ModelInfo {
	info := provider.ModelInfo{Name: m.Name, ContextWindow: m.ContextWindow, MaxOutputTokens: m.MaxOutputTokens,
		SupportsThinking: m.SupportsThinking, SupportsTools: m.SupportsTools}
	if pr := m.Price; pr != nil {
		info.Price = &provider.Price{InputPerMTok: pr.InputPerMTok, OutputPerMTok: pr.OutputPerMTok,
			CacheReadPerMTok: pr.CacheReadPerMTok, CacheWritePerMTok: pr.CacheWritePerMTok}
	}
	return info
}

// checkModels validates the provider's models; key is the provider's key
// path ("providers[2]").
func (p *Provider) checkModels(key string) error {
	seen := map[string]bool{}
	for j, m := range p.Models {
		mkey := fmt.Sprintf("%s.models[%d]", key, j)
		name := m.Name
		if strings.TrimSpace(name) == "" || strings.Contains(name, "/") && p.Kind == provider.KindSimulated {
			if name == "" {
				mkey += ".name"
			}
			return fmt.Errorf("config: %s: %q is not a model name", mkey, name)
		}
		if seen[name] {
			return fmt.Errorf("config: %s: model %q is listed twice", mkey, name)
		}
		seen[name] = true
		switch {
		case m.ContextWindow < 0:
			return fmt.Errorf("config: %s.context_window: must be >= 0, got %d", mkey, m.ContextWindow)
		case m.MaxOutputTokens < 0:
			return fmt.Errorf("config: %s.max_output_tokens: must be >= 0, got %d", mkey, m.MaxOutputTokens)
		case m.ContextWindow > 0 && m.MaxOutputTokens > m.ContextWindow:
			return fmt.Errorf("config: %s.max_output_tokens: %d is more than the context_window (%d)", mkey, m.MaxOutputTokens, m.ContextWindow)
		}
		if pr := m.Price; pr != nil {
			for _, f := range []struct {
				name string
				v    float64
			}{{"input_per_mtok", pr.InputPerMTok}, {"output_per_mtok", pr.OutputPerMTok},
				{"cache_read_per_mtok", pr.CacheReadPerMTok}, {"cache_write_per_mtok", pr.CacheWritePerMTok}} {
				if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
					return fmt.Errorf("config: %s.price.%s: must be a number >= 0, got %v", mkey, f.name, f.v)
				}
			}
		}
	}
	return nil
}
