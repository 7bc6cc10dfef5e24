package config

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/agentd/agentd/internal/provider"
)

// apiVersionPattern is the form of Azure OpenAI's dated api-versions
// ("2024-10-21", "2025-04-01-preview").
var apiVersionPattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(-preview)?$`)

// checkAzure validates the keys of an azure-openai provider (and that no
// other kind has api_version): a base_url (the resource endpoint, there is
// no default), a models list (the deployments), a dated api_version.
func (p *Provider) checkAzure(key string) error {
	if p.Kind != provider.KindAzureOpenAI {
		switch {
		case p.APIVersion != "":
			return fmt.Errorf("config: %s.api_version: only an azure-openai provider takes it", key)
		case p.API != "":
			return fmt.Errorf("config: %s.api: only an azure-openai provider takes it (the other kinds name their API)", key)
		case p.EntraID:
			return fmt.Errorf("config: %s.entra_id: only an azure-openai provider takes it", key)
		}
		return nil
	}
	switch {
	case p.BaseURL == "":
		return fmt.Errorf("config: %s.base_url: an azure-openai provider needs its resource endpoint (https://<resource>.openai.azure.com)", key)
	case len(p.Models) == 0:
		return fmt.Errorf("config: %s.models: an azure-openai provider needs its deployments (each model's name is a deployment name)", key)
	case p.APIVersion != "" && !apiVersionPattern.MatchString(p.APIVersion):
		return fmt.Errorf("config: %s.api_version: %q is not an api-version such as 2024-10-21 or 2025-04-01-preview", key, p.APIVersion)
	case p.API != "" && p.API != "chat" && p.API != "responses":
		return fmt.Errorf("config: %s.api: %q is not an Azure OpenAI API (chat or responses)", key, p.API)
	case p.ChainResponses && p.API != "responses":
		return fmt.Errorf("config: %s.chain_responses: an azure-openai provider speaks Chat Completions, which has no stored responses", key)
	case p.API == "responses" && p.APIVersion != "" && p.APIVersion < "2025-03-01":
		return fmt.Errorf("config: %s.api_version: %s has no Responses API (from 2025-03-01-preview on)", key, p.APIVersion)
	case p.EntraID && p.AuthHeader != "" && !strings.EqualFold(p.AuthHeader, "authorization"):
		return fmt.Errorf("config: %s.auth_header: with entra_id the token goes in Authorization", key)
	}
	return nil
}
