package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"regexp"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/agentd/agentd/internal/server/token"
)

// LocalTenant owns every session when no tokens are configured.
const LocalTenant = "local"

var credentialIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

type tenantKey struct{}

// caller is who makes a call: a tenant, and whether its token is an
// admin's (only admins manage the credentials that serve every tenant).
type caller struct {
	tenant string
	admin  bool
}

// localCaller is the one tenant of local mode (no tokens): the developer at
// this machine, an admin.
var localCaller = caller{tenant: LocalTenant, admin: true}

func callerOf(ctx context.Context) caller {
	if c, ok := ctx.Value(tenantKey{}).(caller); ok {
		return c
	}
	return localCaller
}

func tenantOf(ctx context.Context) string { return callerOf(ctx).tenant }

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, tenantKey{}, c)
}

// authenticator maps bearer tokens to tenants. With no tokens it lets every
// call through as the local tenant.
type authenticator struct {
	tokens map[[32]byte]caller // sha256(token) -> its holder
}

func newAuthenticator(tokens map[string]caller) *authenticator {
	a := &authenticator{tokens: map[[32]byte]caller{}}
	for tok, c := range tokens {
		a.tokens[sha256.Sum256([]byte(tok))] = c
	}
	return a
}

// Health checking and reflection need no token.
func publicMethod(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.") || strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

func (a *authenticator) authenticate(ctx context.Context, fullMethod string) (context.Context, error) {
	if publicMethod(fullMethod) {
		return withCaller(ctx, caller{tenant: LocalTenant}), nil
	}
	// A browser's stream ticket, checked by the HTTP face (see grant.go).
	// Both keys are read in place: metadata.FromIncomingContext would copy
	// the call's whole metadata (a map, a slice per key) on every call.
	if gctx, ok, err := authenticateGrant(ctx, fullMethod, metadata.ValueFromIncomingContext(ctx, token.GrantKey)); ok {
		return gctx, err
	}
	if len(a.tokens) == 0 {
		return withCaller(ctx, localCaller), nil
	}
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(vals) == 0 {
		return nil, errNoToken
	}
	who, err := a.check(vals[0])
	if err != nil {
		return nil, err
	}
	return withCaller(ctx, who), nil
}

var errNoToken = status.Error(codes.Unauthenticated, "missing bearer token (authorization: Bearer <token>)")

// required reports whether calls need a token (false in local mode).
func (a *authenticator) required() bool { return len(a.tokens) > 0 }

// check returns the holder of an Authorization value "Bearer <token>" (the
// scheme in any case, RFC 7235).
func (a *authenticator) check(header string) (caller, error) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return caller{}, status.Error(codes.Unauthenticated, "authorization must be \"Bearer <token>\"")
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	// Compare the digest to every known one in constant time.
	var who caller
	for k, c := range a.tokens {
		if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
			who = c
		}
	}
	if who.tenant == "" {
		return caller{}, status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	return who, nil
}

// tap refuses a gRPC call without a valid token before its request message
// is read (the interceptors run after it is): an unauthenticated client
// costs no buffer. Health checking, reflection and the gateway's ticket
// grants (checked by the interceptor) pass.
func (a *authenticator) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !a.required() || publicMethod(info.FullMethodName) || len(info.Header.Get(token.GrantKey)) > 0 {
		return ctx, nil
	}
	vals := info.Header.Get("authorization")
	if len(vals) == 0 {
		return nil, errNoToken
	}
	if _, err := a.check(vals[0]); err != nil {
		return nil, err
	}
	return ctx, nil
}

func (a *authenticator) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (a *authenticator) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return h(srv, withGrantCheck(ss, ctx))
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
