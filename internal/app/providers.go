package app

import (
	"fmt"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/anthropic"
	"github.com/agentd/agentd/internal/provider/bedrock"
	"github.com/agentd/agentd/internal/provider/gemini"
	"github.com/agentd/agentd/internal/provider/openai"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/session"
)

// buildProviders is the session engine's view of the configured providers,
// each with its client, and their names.
func buildProviders(cfg *config.Config) ([]session.Provider, []string, error) {
	providers := make([]session.Provider, 0, len(cfg.Providers))
	names := make([]string, 0, len(cfg.Providers))
	for _, pc := range cfg.Providers {
		client, err := newProviderClient(pc)
		if err != nil {
			return nil, nil, fmt.Errorf("providers %s: %w", pc.Name, err)
		}
		providers = append(providers, session.Provider{Name: pc.Name, Kind: pc.Kind, Models: pc.ModelNames(), Catalog: pc.Catalog(),
			RotateCredentials: !pc.Sticky(), Client: client, Pace: pc.Paces()})
		names = append(names, pc.Name)
	}
	return providers, names, nil
}

// newProviderClient builds the client of one configured provider, by its
// kind.
func newProviderClient(pc config.Provider) (provider.Provider, error) {
	timeout := pc.TimeoutMs.Duration()
	readTimeout := pc.ReadTimeoutMs.Duration()
	switch pc.Kind {
	case provider.KindSimulated:
		return simProvider{sim.New(sim.Options{
			FirstTokenDelay: pc.FirstTokenDelayMs.Duration(),
			TokenDelay:      pc.TokenDelayMs.Duration(),
			NoPromptCache:   !pc.PromptCacheOn(),
		})}, nil
	case provider.KindAnthropic:
		return anthropic.New(anthropic.Options{BaseURL: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout,
			Headers: pc.Headers, AuthHeader: pc.AuthHeader, MaxTokens: pc.MaxTokens, NoPromptCache: !pc.PromptCacheOn()}), nil
	case provider.KindOpenAIResponses, provider.KindOpenAIChat:
		api := openai.APIResponses
		if pc.Kind == provider.KindOpenAIChat {
			api = openai.APIChat
		}
		return openai.New(openai.Options{API: api, BaseURL: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout,
			Headers: pc.Headers, AuthHeader: pc.AuthHeader, ChainResponses: pc.ChainResponses,
			EncryptedReasoning: pc.EncryptedReasoning, NoPromptCache: !pc.PromptCacheOn()}), nil
	case provider.KindAzureOpenAI:
		return openai.New(openai.Options{Azure: true, APIVersion: pc.APIVersion, BaseURL: pc.BaseURL, Timeout: timeout,
			ReadTimeout: readTimeout, Headers: pc.Headers, AuthHeader: pc.AuthHeader, API: pc.API, EntraID: pc.EntraID,
			TokenURL: pc.TokenURL, ChainResponses: pc.ChainResponses, EncryptedReasoning: pc.EncryptedReasoning}), nil
	case provider.KindBedrock:
		return bedrock.New(bedrock.Options{Region: pc.Region, Endpoint: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout,
			MaxTokens: pc.MaxTokens}), nil
	case provider.KindGemini:
		return gemini.New(gemini.Options{BaseURL: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout,
			Headers: pc.Headers, AuthHeader: pc.AuthHeader}), nil
	case provider.KindVertex:
		return gemini.New(gemini.Options{BaseURL: pc.BaseURL, Timeout: timeout, ReadTimeout: readTimeout, Headers: pc.Headers,
			AuthHeader: pc.AuthHeader, Vertex: &gemini.VertexOptions{Project: pc.Project, Location: pc.Location, TokenURL: pc.TokenURL}}), nil
	default:
		return nil, fmt.Errorf("unknown provider kind %q", pc.Kind)
	}
}

// simProvider lets the session engine reject a bad fault script up front.
type simProvider struct{ *sim.Provider }

func (p simProvider) ValidatePrompt(text string) error {
	_, err := sim.ParseScript(text)
	return err
}
