package server

import (
	"context"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/credstore"
)

// credentialService implements agentd.v1.CredentialService.
type credentialService struct {
	agentdv1.UnimplementedCredentialServiceServer
	store     credstore.Store
	providers map[string]bool
}

func (c *credentialService) CreateCredential(ctx context.Context, req *agentdv1.CreateCredentialRequest) (*agentdv1.Credential, error) {
	switch {
	case req.GetProvider() == "":
		return nil, invalidArg("provider", "is required")
	case !c.providers[req.GetProvider()]:
		return nil, invalidArg("provider", "unknown provider %q", req.GetProvider())
	case req.GetSecret() == "":
		return nil, invalidArg("secret", "is required")
	case req.GetBankedResets() < 0:
		return nil, invalidArg("banked_resets", "must be >= 0")
	case req.GetId() != "" && !credentialIDRe.MatchString(req.GetId()):
		return nil, invalidArg("id", "%q must match %s", req.GetId(), credentialIDRe)
	}
	info, err := c.store.Add(ctx, credstore.Credential{
		ID: req.GetId(), Provider: req.GetProvider(), Secret: req.GetSecret(),
		Source: credstore.SourceAPI, BankedResets: int(req.GetBankedResets()),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return credentialToProto(info), nil
}

func (c *credentialService) ListCredentials(ctx context.Context, req *agentdv1.ListCredentialsRequest) (*agentdv1.ListCredentialsResponse, error) {
	if p := req.GetProvider(); p != "" && !c.providers[p] {
		return nil, invalidArg("provider", "unknown provider %q", p)
	}
	resp := &agentdv1.ListCredentialsResponse{}
	infos, err := c.store.List(ctx, req.GetProvider())
	if err != nil {
		return nil, toStatus(err)
	}
	for _, i := range infos {
		resp.Credentials = append(resp.Credentials, credentialToProto(i))
	}
	return resp, nil
}

func (c *credentialService) DeleteCredential(ctx context.Context, req *agentdv1.DeleteCredentialRequest) (*agentdv1.DeleteCredentialResponse, error) {
	if req.GetCredentialId() == "" {
		return nil, invalidArg("credential_id", "is required")
	}
	if err := c.store.Delete(ctx, req.GetCredentialId()); err != nil {
		return nil, toStatus(err)
	}
	return &agentdv1.DeleteCredentialResponse{}, nil
}
