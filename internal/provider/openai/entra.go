package openai

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/internal/oauth"
	"github.com/agentd/agentd/internal/provider/internal/wire"
)

// DefaultEntraTokenURL is Microsoft Entra ID's token endpoint (v2.0),
// "{tenant}" standing for the credential's tenant id.
const DefaultEntraTokenURL = "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token"

// EntraScope is the scope of Azure OpenAI's access tokens.
const EntraScope = "https://cognitiveservices.azure.com/.default"

// tenantPattern is the form of a tenant: its id (a GUID) or one of its
// domains; nothing that could change the token URL's path.
var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]*$`)

// entraAuth is an Azure client's Entra ID credentials: one token source
// per client credential, shared by every call.
type entraAuth struct {
	tokenURL string
	tokens   *oauth.Cache
}

func newEntraAuth(opts Options) *entraAuth {
	u := strings.TrimSpace(opts.TokenURL)
	if u == "" {
		u = DefaultEntraTokenURL
	}
	return &entraAuth{tokenURL: u, tokens: oauth.NewCache(oauth.Options{
		Timeout: opts.TokenTimeout, HTTPClient: opts.TokenHTTPClient, Now: opts.Now,
	})}
}

// token returns the access token of req's credential and its source, or
// the failed result: a secret that is not client credentials, or a token
// the endpoint would not give (see oauth.Failure).
func (e *entraAuth) token(ctx context.Context, req *provider.Request, onDelta func(provider.Delta)) (string, *oauth.Source, *provider.Result) {
	tenant, clientID, clientSecret, ok := provider.SplitEntraSecret(req.Credential.Secret)
	fail := func(msg string, f *provider.Failure) (string, *oauth.Source, *provider.Result) {
		secrets := []string{req.Credential.Secret}
		if ok {
			secrets = []string{clientSecret}
		}
		r := wire.NewAccSecrets(req.Model, secrets, onDelta).Fail(msg, "", f)
		return "", nil, &r
	}
	name := "azure-openai: credential " + req.Credential.ID
	switch {
	case !ok:
		return fail(name+": with Entra ID a secret is TENANT_ID:CLIENT_ID:CLIENT_SECRET",
			&provider.Failure{Status: http.StatusUnauthorized, Type: "authentication_error"})
	case !tenantPattern.MatchString(tenant):
		return fail(fmt.Sprintf("%s: %q is not a tenant id or domain", name, tenant),
			&provider.Failure{Status: http.StatusUnauthorized, Type: "authentication_error"})
	}
	src, err := e.tokens.Source(req.Credential.Secret, func() (oauth.Fetch, any, error) {
		cfg := &clientcredentials.Config{
			ClientID: clientID, ClientSecret: clientSecret, Scopes: []string{EntraScope},
			TokenURL: strings.ReplaceAll(e.tokenURL, "{tenant}", url.PathEscape(tenant)),
			// Entra ID takes the secret in the form (client_secret_post);
			// auto-detection would send a failing Basic request first.
			AuthStyle: oauth2.AuthStyleInParams,
		}
		return cfg.Token, nil, nil
	})
	if err != nil {
		return fail(name+": "+err.Error(), &provider.Failure{Status: http.StatusUnauthorized, Type: "authentication_error"})
	}
	tok, err := src.Token(ctx)
	if err != nil {
		if ctx.Err() != nil {
			r := wire.NewAcc(req.Model, clientSecret, onDelta).Aborted()
			return "", nil, &r
		}
		return fail(oauth.Failure(name, err))
	}
	return tok.AccessToken, src, nil
}
