package server

import (
	"context"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentd/agentd/internal/server/token"
	"github.com/agentd/agentd/internal/testkit"
)

// Run it with
//
//	go test -run '^$' -fuzz '^FuzzStreamGrant$' -fuzztime 10m ./internal/server/
//
// (FuzzStreamTicket, of the tickets themselves, is package token's.)

// FuzzStreamGrant checks the grants the HTTP face hands the gRPC layer:
// a grant made for a tenant's session reads back as them (for valid names),
// an edited grant reads back as the same tenant and session or not at all,
// and only StreamEvents takes one.
func FuzzStreamGrant(f *testing.F) {
	for _, s := range []struct {
		tenant, session string
		edits           []byte
	}{
		{"team-a", "ses_1", nil},
		{"local", "ses_aaaaaaaaaaaaaaaaaaaaaaaaaa", []byte{0, 3, 'x'}},
		{"team-a", "ses_1", []byte{0, 255, 'B'}},
		{"team-a", "ses_1", []byte{1, 10, '\n'}},
		{"team-a", "ses_1", []byte{2, 0, 0, 2, 0, 0}},
		{"", "ses_1", nil},
		{"team-a", "", nil},
		{"a\xffb", "ses_1", nil},
		{"<team>&", "ses\u2028", nil},
		{"team-a\",\"s\":\"ses_2", "ses_1", nil},
	} {
		f.Add(s.tenant, s.session, s.edits)
	}
	f.Fuzz(func(t *testing.T, tenant, sessionID string, edits []byte) {
		now := time.Now()
		g := token.MakeGrant(tenant, sessionID)
		gt, gs, err := token.ParseGrant(g, now)
		switch {
		case err == nil && (gt != tenant || gs != sessionID):
			t.Fatalf("grant for %q %q read back as %q %q", tenant, sessionID, gt, gs)
		case err != nil && tenant != "" && sessionID != "" && utf8.ValidString(tenant) && utf8.ValidString(sessionID):
			t.Fatalf("grant for %q %q: %v", tenant, sessionID, err)
		}
		if _, _, err := token.ParseGrant(g, now.Add(token.GrantTTL+time.Second)); err == nil {
			t.Fatalf("grant for %q %q passed after its expiry", tenant, sessionID)
		}

		mutated := testkit.Edit(g, edits)
		if mt, ms, err := token.ParseGrant(mutated, now); err == nil && (mt != tenant || ms != sessionID) {
			t.Fatalf("edited grant %q (of %q for %q %q) read as %q %q", mutated, g, tenant, sessionID, mt, ms)
		}
		vals := metadata.Pairs(token.GrantKey, mutated).Get(token.GrantKey)
		if _, ok, err := authenticateGrant(context.Background(), "/agentd.v1.AgentService/Prompt", vals); !ok || status.Code(err) != codes.Unauthenticated {
			t.Fatalf("a grant on Prompt: %v %v", ok, err)
		}
		ctx, ok, err := authenticateGrant(context.Background(), streamEventsRPC, vals)
		if !ok {
			t.Fatalf("a grant was not taken for one")
		}
		if err == nil {
			if c := callerOf(ctx); c.tenant != tenant || c.admin {
				t.Fatalf("grant %q authenticated as %+v, want tenant %q", mutated, c, tenant)
			}
			if sid, _ := ctx.Value(grantSessionKey{}).(string); sid != sessionID {
				t.Fatalf("grant %q scoped to %q, want %q", mutated, sid, sessionID)
			}
		} else if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("grant %q: %v", mutated, err)
		}
	})
}
