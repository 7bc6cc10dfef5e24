package server

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/server/token"
)

// Stream tickets (package token has the scheme): CreateStreamTicket mints
// them, the HTTP face checks them (web.go) and hands the gateway's call a
// grant, and the auth interceptor admits a call with a grant here.

const streamEventsRPC = "/agentd.v1.AgentService/StreamEvents"

// CreateStreamTicket implements the AgentService RPC.
func (a *agentService) CreateStreamTicket(ctx context.Context, req *agentdv1.CreateStreamTicketRequest) (*agentdv1.CreateStreamTicketResponse, error) {
	if _, err := a.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	ticket, exp := a.tickets.Mint(tenantOf(ctx), req.GetSessionId())
	return &agentdv1.CreateStreamTicketResponse{Ticket: ticket, ExpireTime: timestamppb.New(exp)}, nil
}

type grantSessionKey struct{}

// authenticateGrant admits a call that carries a stream grant: StreamEvents
// only, as the grant's tenant, for the grant's session only (checked on the
// request by grantStream). vals are the call's values of token.GrantKey.
func authenticateGrant(ctx context.Context, fullMethod string, vals []string) (context.Context, bool, error) {
	if len(vals) == 0 {
		return ctx, false, nil
	}
	if fullMethod != streamEventsRPC || len(vals) != 1 {
		return nil, true, status.Error(codes.Unauthenticated, "a stream ticket only reads a session's events")
	}
	tenant, sessionID, err := token.ParseGrant(vals[0], time.Now())
	if err != nil {
		return nil, true, status.Error(codes.Unauthenticated, err.Error())
	}
	ctx = withCaller(ctx, caller{tenant: tenant})
	return context.WithValue(ctx, grantSessionKey{}, sessionID), true, nil
}

// grantStream refuses a StreamEvents request for another session than the
// grant's.
type grantStream struct {
	ctxStream
	sessionID string
}

func (s *grantStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if r, ok := m.(*agentdv1.StreamEventsRequest); !ok || r.GetSessionId() != s.sessionID {
		return status.Error(codes.Unauthenticated, "stream ticket is for another session")
	}
	return nil
}

// withGrantCheck wraps a stream whose context carries a grant.
func withGrantCheck(ss grpc.ServerStream, ctx context.Context) grpc.ServerStream {
	if sid, ok := ctx.Value(grantSessionKey{}).(string); ok {
		return &grantStream{ctxStream: ctxStream{ServerStream: ss, ctx: ctx}, sessionID: sid}
	}
	return &ctxStream{ServerStream: ss, ctx: ctx}
}
