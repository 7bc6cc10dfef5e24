package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

// Stream tickets let a browser's EventSource, which cannot send an
// authorization header, read one session's events:
//
//   - CreateStreamTicket (POST /v1/sessions/{id}:streamTicket, normal auth)
//     mints "v1.<payload>.<mac>": the payload names the tenant, the session
//     and the expiry; the MAC is HMAC-SHA256 under the server's ticket key
//     (http.ticket_key_env, else a random key of this process).
//   - The HTTP face accepts "?ticket=" on GET /v1/sessions/{id}/events only:
//     it checks the MAC, the expiry and the session, removes the ticket from
//     the URL (so it reaches no log), and hands the gateway's gRPC call a
//     grant: metadata "x-agentd-stream-grant" naming the tenant and the
//     session, MACed with a secret that never leaves this process.
//   - The gRPC auth interceptor accepts a grant instead of a bearer token on
//     StreamEvents only, and only for the session it names. A client that
//     sends its own grant metadata cannot forge its MAC.

const (
	ticketPrefix    = "v1."
	streamGrantKey  = "x-agentd-stream-grant"
	grantTTL        = time.Minute
	streamEventsRPC = "/agentd.v1.AgentService/StreamEvents"
)

var (
	errTicketInvalid = errors.New("invalid stream ticket")
	errTicketExpired = errors.New("stream ticket expired (create another: POST /v1/sessions/{session_id}:streamTicket)")
	errTicketSession = errors.New("stream ticket is for another session")
)

// ticketAuthority mints and checks stream tickets.
type ticketAuthority struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

type ticketPayload struct {
	Tenant  string `json:"t"`
	Session string `json:"s"`
	Expiry  int64  `json:"e"` // unix milliseconds
	Nonce   string `json:"n"`
}

func newTicketAuthority(key string, ttl time.Duration, now func() time.Time) *ticketAuthority {
	k := []byte(key)
	if len(k) == 0 {
		k = make([]byte, 32)
		rand.Read(k) // never fails (crypto/rand)
	}
	return &ticketAuthority{key: k, ttl: ttl, now: now}
}

func (t *ticketAuthority) mac(payload string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte("agentd stream ticket\x00" + payload))
	return m.Sum(nil)
}

// mint returns a ticket for tenant's session and its expiry.
func (t *ticketAuthority) mint(tenant, sessionID string) (string, time.Time) {
	exp := t.now().Add(t.ttl)
	nonce := make([]byte, 9)
	rand.Read(nonce)
	body, _ := json.Marshal(ticketPayload{Tenant: tenant, Session: sessionID, Expiry: exp.UnixMilli(),
		Nonce: base64.RawURLEncoding.EncodeToString(nonce)})
	payload := base64.RawURLEncoding.EncodeToString(body)
	return ticketPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(t.mac(payload)), exp
}

// verify checks a ticket for sessionID and returns its tenant.
func (t *ticketAuthority) verify(ticket, sessionID string) (string, error) {
	rest, ok := strings.CutPrefix(ticket, ticketPrefix)
	if !ok {
		return "", errTicketInvalid
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return "", errTicketInvalid
	}
	// The MAC as mint wrote it, byte for byte: base64's decoder would also
	// take other spellings of it (a line break inside, other trailing
	// bits), so that edited tickets would pass.
	if !hmac.Equal([]byte(sig), []byte(base64.RawURLEncoding.EncodeToString(t.mac(payload)))) {
		return "", errTicketInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", errTicketInvalid
	}
	var p ticketPayload
	if err := json.Unmarshal(body, &p); err != nil || p.Tenant == "" || p.Session == "" {
		return "", errTicketInvalid
	}
	if !t.now().Before(time.UnixMilli(p.Expiry)) {
		return "", errTicketExpired
	}
	if p.Session != sessionID {
		return "", errTicketSession
	}
	return p.Tenant, nil
}

// CreateStreamTicket implements the AgentService RPC.
func (a *agentService) CreateStreamTicket(ctx context.Context, req *agentdv1.CreateStreamTicketRequest) (*agentdv1.CreateStreamTicketResponse, error) {
	if _, err := a.session(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	ticket, exp := a.tickets.mint(tenantOf(ctx), req.GetSessionId())
	return &agentdv1.CreateStreamTicketResponse{Ticket: ticket, ExpireTime: timestamppb.New(exp)}, nil
}

// grantSecret authenticates the grants the HTTP face hands the gRPC layer.
// It is random per process and never leaves it.
var grantSecret = func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
}()

func grantMAC(tenant, sessionID string, exp int64) string {
	m := hmac.New(sha256.New, grantSecret)
	body, _ := json.Marshal([]any{"agentd stream grant", tenant, sessionID, exp})
	m.Write(body)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// makeGrant is the metadata value that lets the gateway's StreamEvents call
// read sessionID as tenant.
func makeGrant(tenant, sessionID string) string {
	exp := time.Now().Add(grantTTL).UnixMilli()
	body, _ := json.Marshal(ticketPayload{Tenant: tenant, Session: sessionID, Expiry: exp})
	return base64.RawURLEncoding.EncodeToString(body) + "." + grantMAC(tenant, sessionID, exp)
}

func parseGrant(v string, now time.Time) (tenant, sessionID string, err error) {
	payload, sig, ok := strings.Cut(v, ".")
	if !ok {
		return "", "", errors.New("malformed stream grant")
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", "", errors.New("malformed stream grant")
	}
	var p ticketPayload
	if err := json.Unmarshal(body, &p); err != nil || p.Tenant == "" || p.Session == "" {
		return "", "", errors.New("malformed stream grant")
	}
	if !hmac.Equal([]byte(sig), []byte(grantMAC(p.Tenant, p.Session, p.Expiry))) {
		return "", "", errors.New("invalid stream grant")
	}
	if !now.Before(time.UnixMilli(p.Expiry)) {
		return "", "", errors.New("stream grant expired")
	}
	return p.Tenant, p.Session, nil
}

type grantSessionKey struct{}

// authenticateGrant admits a call that carries a stream grant: StreamEvents
// only, as the grant's tenant, for the grant's session only (checked on the
// request by grantStream).
func authenticateGrant(ctx context.Context, fullMethod string, md metadata.MD) (context.Context, bool, error) {
	vals := md.Get(streamGrantKey)
	if len(vals) == 0 {
		return ctx, false, nil
	}
	if fullMethod != streamEventsRPC || len(vals) != 1 {
		return nil, true, status.Error(codes.Unauthenticated, "a stream ticket only reads a session's events")
	}
	tenant, sessionID, err := parseGrant(vals[0], time.Now())
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
