package credstore

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// A script whose reply is lost (the connection drops after Redis ran it) is
// sent again by go-redis on a new connection: the second run must answer as
// the first did and change nothing more. Each case loses the reply of one
// script, through a proxy in front of a real redis-server.
func TestRedisLostReplyRunsOnce(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	s := newRedisStore(t, newTestClient(t, proxy.Addr()), RedisOptions{KeyPrefix: "lost:"})
	ctx := testkit.Context(t)
	lose := func(script *redis.Script) { proxy.LoseScriptReply(ctx, script) }
	lost := func() { proxy.WaitLost(ctx) }

	// A tenant's own credential added through the API: added, not "exists".
	lose(addScript)
	info, err := s.Add(ctx, Credential{ID: "own", Provider: "p", Owner: "t1", Secret: "secret-own"})
	lost()
	if err != nil || info.ID != "own" {
		t.Fatalf("Add = %+v, %v; want it added", info, err)
	}
	if infos, err := s.List(ctx, Filter{Provider: "p", Tenant: "t1"}); err != nil || len(infos) != 1 {
		t.Fatalf("List = %+v, %v; want the one credential", infos, err)
	}

	// Deleted, not "not found".
	lose(deleteScript)
	err = s.Delete(ctx, "t1", "own")
	lost()
	if err != nil {
		t.Fatalf("Delete = %v; want it deleted", err)
	}
	if err := s.Delete(ctx, "t1", "own"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a second Delete = %v; want ErrNotFound", err)
	}

	// A usage limit that redeems a banked reset spends one, not two.
	mustAdd(t, s, Credential{ID: "a", Provider: "p", Secret: "secret-a"})
	mustAdd(t, s, Credential{ID: "b", Provider: "p", Secret: "secret-b", BankedResets: 2, AutoRedeem: true})
	usageLimited(t, s, "b", time.Hour, true)
	lose(usageLimitedScript)
	sw := usageLimited(t, s, "a", time.Hour, true)
	lost()
	if !sw.Switched || !sw.Redeemed || sw.To.ID != "b" || sw.BankedLeft != 1 {
		t.Fatalf("UsageLimited(a) = %+v; want a redeem of b, 1 left", sw)
	}
	if b := infoOf(t, s, "p", "b"); b.BankedResets != 1 {
		t.Fatalf("b after the redeem = %+v; want 1 banked reset left", b)
	}
}
