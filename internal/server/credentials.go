package server

import (
	"context"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/credstore"
	"github.com/agentd/agentd/internal/server/convert"
)

// credentialService implements agentd.v1.CredentialService.
//
// Tenancy: server credentials (owner empty: the configuration file's and
// those an admin adds) serve every tenant; only an admin (a token with
// admin: true, or local mode's one tenant) adds or deletes them. A
// credential a non-admin tenant adds is its own: it serves that tenant's
// sessions only, before the server's (see package credstore), and only
// that tenant (and admins) list it. To every other tenant it does not
// exist: its ID is the owner's (another tenant may have the same one), and
// deleting it is NOT_FOUND. A non-admin deleting a server credential is
// PERMISSION_DENIED. Secrets are write-only: never in a response, log,
// event or error.
type credentialService struct {
	agentdv1.UnimplementedCredentialServiceServer
	store     credstore.Store
	providers map[string]bool
}

// maxSecretBytes bounds a credential's secret: a key, a token or a
// service account's JSON fits many times over.
const maxSecretBytes = 64 << 10

// ownerFor is the owner of the credentials the caller adds and deletes: ""
// (the server's) for an admin, else the caller's tenant.
func ownerFor(ctx context.Context) string {
	if c := callerOf(ctx); !c.admin {
		return c.tenant
	}
	return ""
}

func (c *credentialService) CreateCredential(ctx context.Context, req *agentdv1.CreateCredentialRequest) (*agentdv1.Credential, error) {
	switch {
	case req.GetProvider() == "":
		return nil, convert.InvalidArg("provider", "is required")
	case !c.providers[req.GetProvider()]:
		return nil, convert.InvalidArg("provider", "unknown provider %q", req.GetProvider())
	case req.GetSecret() == "":
		return nil, convert.InvalidArg("secret", "is required")
	case len(req.GetSecret()) > maxSecretBytes:
		return nil, convert.InvalidArg("secret", "is %d bytes, more than %d", len(req.GetSecret()), maxSecretBytes)
	case req.GetBankedResets() < 0:
		return nil, convert.InvalidArg("banked_resets", "must be >= 0")
	case req.GetId() != "" && !credentialIDRe.MatchString(req.GetId()):
		return nil, convert.InvalidArg("id", "%q must match %s", req.GetId(), credentialIDRe)
	case req.GetAccount() != "" && !credentialIDRe.MatchString(req.GetAccount()):
		return nil, convert.InvalidArg("account", "%q must match %s", req.GetAccount(), credentialIDRe)
	}
	info, err := c.store.Add(ctx, credstore.Credential{
		ID: req.GetId(), Provider: req.GetProvider(), Secret: req.GetSecret(),
		Source: credstore.SourceAPI, BankedResets: int(req.GetBankedResets()),
		Owner: ownerFor(ctx), Account: req.GetAccount(),
	})
	if err != nil {
		return nil, convert.ToStatus(err)
	}
	return convert.CredentialToProto(info), nil
}

func (c *credentialService) ListCredentials(ctx context.Context, req *agentdv1.ListCredentialsRequest) (*agentdv1.ListCredentialsResponse, error) {
	if p := req.GetProvider(); p != "" && !c.providers[p] {
		return nil, convert.InvalidArg("provider", "unknown provider %q", p)
	}
	who := callerOf(ctx)
	resp := &agentdv1.ListCredentialsResponse{}
	infos, err := c.store.List(ctx, credstore.Filter{Provider: req.GetProvider(), Tenant: who.tenant, All: who.admin})
	if err != nil {
		return nil, convert.ToStatus(err)
	}
	for _, i := range infos {
		resp.Credentials = append(resp.Credentials, convert.CredentialToProto(i))
	}
	return resp, nil
}

func (c *credentialService) DeleteCredential(ctx context.Context, req *agentdv1.DeleteCredentialRequest) (*agentdv1.DeleteCredentialResponse, error) {
	if req.GetCredentialId() == "" {
		return nil, convert.InvalidArg("credential_id", "is required")
	}
	// ErrNotFound for another tenant's (the ID is looked up among the
	// caller's own only), ErrForbidden for a server credential.
	if err := c.store.Delete(ctx, ownerFor(ctx), req.GetCredentialId()); err != nil {
		return nil, convert.ToStatus(err)
	}
	return &agentdv1.DeleteCredentialResponse{}, nil
}
