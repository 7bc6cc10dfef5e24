package openai

import (
	"net/url"
	"strings"
)

// DefaultAzureAPIVersion is the api-version of Azure OpenAI requests when
// Options.APIVersion is empty: the latest GA data-plane inference version
// (its Chat Completions take stream_options and max_completion_tokens).
const DefaultAzureAPIVersion = "2024-10-21"

// DefaultAzureResponsesAPIVersion is the api-version of Azure OpenAI's
// Responses API when Options.APIVersion is empty (Responses came with
// 2025-03-01-preview; the GA versions before it do not have it).
const DefaultAzureResponsesAPIVersion = "2025-04-01-preview"

// azureDeploymentPlaceholder stands for the deployment in Client.URL.
const azureDeploymentPlaceholder = "{deployment}"

// azureOptions are opts for Azure OpenAI's api: the key in "api-key"
// unless AuthHeader says otherwise (an Entra ID token in Authorization),
// the api's default api-version, and no prompt_cache_key (not a parameter
// of the GA api-versions, which refuse unknown ones; Azure caches prompt
// prefixes on its own).
func azureOptions(opts Options, api string) Options {
	switch {
	case opts.EntraID:
		opts.AuthHeader = "Authorization"
	case opts.AuthHeader == "":
		opts.AuthHeader = "api-key"
	}
	if strings.TrimSpace(opts.APIVersion) == "" {
		opts.APIVersion = DefaultAzureAPIVersion
		if api == APIResponses {
			opts.APIVersion = DefaultAzureResponsesAPIVersion
		}
	}
	opts.NoPromptCache = true
	return opts
}

// azureURL is the Chat Completions endpoint of deployment on the resource
// at base: base+"/openai/deployments/{deployment}/chat/completions?api-version=…".
// A path on base is kept (a gateway in front of the resource); a query on
// base is kept beside api-version.
func azureURL(base, deployment, apiVersion string) string {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil {
		u = &url.URL{Path: strings.TrimSpace(base)}
	}
	p := strings.TrimRight(u.Path, "/") + "/openai/deployments/"
	u.Path, u.RawPath = p+deployment+"/chat/completions", p+url.PathEscape(deployment)+"/chat/completions"
	q := u.Query()
	q.Set("api-version", apiVersion)
	u.RawQuery = q.Encode()
	s := u.String()
	if deployment == azureDeploymentPlaceholder {
		s = strings.Replace(s, url.PathEscape(deployment), deployment, 1)
	}
	return s
}

// azureResponsesURL is the Responses endpoint of the resource at base:
// base+"/openai/responses?api-version=…" (the deployment is the body's
// model). A path on base is kept, as is a query.
func azureResponsesURL(base, apiVersion string) string {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil {
		u = &url.URL{Path: strings.TrimSpace(base)}
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/openai/responses"
	u.RawPath = ""
	q := u.Query()
	q.Set("api-version", apiVersion)
	u.RawQuery = q.Encode()
	return u.String()
}
