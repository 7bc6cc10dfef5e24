package config

import (
	"fmt"
	"net/url"
	"regexp"

	"github.com/agentd/agentd/internal/provider"
)

// locationPattern is the form of a Google Cloud location ("us-central1",
// "europe-west4", "global"); projectPattern of a project id (6 to 30
// lowercase letters, digits and hyphens, starting with a letter; a domain-
// scoped "example.com:my-project" too).
var (
	locationPattern = regexp.MustCompile(`^[a-z][a-z0-9-]*[a-z0-9]$`)
	projectPattern  = regexp.MustCompile(`^([a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
)

// checkVertex validates the keys of a vertex provider (and that no other
// kind has project or location), and token_url, which vertex and an
// azure-openai provider with entra_id take.
func (p *Provider) checkVertex(key string) error {
	if p.TokenURL != "" {
		if p.Kind != provider.KindVertex && !(p.Kind == provider.KindAzureOpenAI && p.EntraID) {
			return fmt.Errorf("config: %s.token_url: only a vertex provider or an azure-openai provider with entra_id takes it", key)
		}
		u, err := url.Parse(p.TokenURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("config: %s.token_url: %q is not an http(s) URL", key, p.TokenURL)
		}
	}
	if p.Kind != provider.KindVertex {
		switch {
		case p.Project != "":
			return fmt.Errorf("config: %s.project: only a vertex provider takes it", key)
		case p.Location != "":
			return fmt.Errorf("config: %s.location: only a vertex provider takes it", key)
		}
		return nil
	}
	switch {
	case p.Project != "" && !projectPattern.MatchString(p.Project):
		return fmt.Errorf("config: %s.project: %q is not a Google Cloud project id (such as my-project-123)", key, p.Project)
	case p.Location != "" && !locationPattern.MatchString(p.Location):
		return fmt.Errorf("config: %s.location: %q is not a Google Cloud location (such as us-central1 or global)", key, p.Location)
	case p.ChainResponses || p.EncryptedReasoning:
		return fmt.Errorf("config: %s: chain_responses and encrypted_reasoning are OpenAI Responses options", key)
	}
	return nil
}
