package sessionstore

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// Create counts the tenant's sessions and adds the new one in one step: at
// the limit nothing is stored, whichever store (replica) asks, however many
// at once; other tenants are not concerned; a removed session frees its
// place.
func TestCreateSessionsPerTenant(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	a := newStore(t, c, Options{})
	b := newStore(t, c, Options{})
	ctx := testkit.Context(t)

	for i := range 3 {
		res, err := a.Create(ctx, record(fmt.Sprintf("s%d", i), "acme"), 3)
		if err != nil || !res.Created || res.Sessions != i+1 || res.Order == 0 {
			t.Fatalf("Create %d = %+v, %v", i, res, err)
		}
	}
	res, err := b.Create(ctx, record("s3", "acme"), 3)
	if err != nil || res.Created || res.Sessions != 3 || res.Order != 0 {
		t.Fatalf("Create over the limit = %+v, %v", res, err)
	}
	if _, ok, err := a.Load(ctx, "s3"); ok || err != nil {
		t.Fatalf("the refused session's record: found %v, %v", ok, err)
	}
	if n := c.Exists(ctx, a.key("s3", "meta")).Val(); n != 0 {
		t.Fatal("the refused session's meta stays")
	}
	recs, err := b.ListRecords(ctx, "acme", 0, 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("ListRecords = %d records, %v", len(recs), err)
	}
	// Another tenant has its own count.
	if res, err := b.Create(ctx, record("o0", "other"), 3); err != nil || !res.Created || res.Sessions != 1 {
		t.Fatalf("Create for another tenant = %+v, %v", res, err)
	}
	// A removed session frees its place.
	must(t, a.Remove(ctx, "s0", "acme"))
	if res, err := b.Create(ctx, record("s4", "acme"), 3); err != nil || !res.Created || res.Sessions != 3 {
		t.Fatalf("Create after a Remove = %+v, %v", res, err)
	}
	// 0: no bound.
	if res, err := b.Create(ctx, record("s5", "acme"), 0); err != nil || !res.Created || res.Sessions != 4 {
		t.Fatalf("Create without a bound = %+v, %v", res, err)
	}

	// Many at once from two stores: exactly the limit's worth get in, and
	// only their records exist. After the scripts were flushed (NOSCRIPT).
	must(t, c.ScriptFlush(ctx).Err())
	const n, limit = 24, 5
	var wg sync.WaitGroup
	created := make([]bool, n)
	for i := range n {
		st := []*Redis{a, b}[i%2]
		wg.Go(func() {
			res, err := st.Create(ctx, record(fmt.Sprintf("r%02d", i), "race"), limit)
			if err != nil {
				t.Errorf("Create r%02d: %v", i, err)
			}
			created[i] = res.Created
		})
	}
	wg.Wait()
	var ids []string
	for i, ok := range created {
		if ok {
			ids = append(ids, fmt.Sprintf("r%02d", i))
		}
		if _, found, _ := a.Load(ctx, fmt.Sprintf("r%02d", i)); found != ok {
			t.Errorf("r%02d: created %v, record found %v", i, ok, found)
		}
	}
	if len(ids) != limit {
		t.Fatalf("%d sessions created at once with a limit of %d", len(ids), limit)
	}
	recs, err = a.ListRecords(ctx, "race", 0, 100)
	if err != nil || len(recs) != limit {
		t.Fatalf("ListRecords = %d records, %v", len(recs), err)
	}
}

// prompts is the tenant's running prompts as the store counts them.
func prompts(t *testing.T, s *Redis, tenant string) []string {
	t.Helper()
	ids, err := s.c.ZRange(t.Context(), s.promptsKey(tenant), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Start takes the prompt's slot with the lease, in one round trip: a
// tenant at its limit gets Limited and nothing of the session changes
// (lease, run, running set, history); a busy session's Start leaves no
// slot; Finish and EndRun free the slot; Renew extends it; a slot past its
// time no longer counts; Occupy counts a taken-over prompt whatever the
// limit.
func TestStartPromptSlots(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	a := newStore(t, c, Options{})
	b := newStore(t, c, Options{})
	ctx := testkit.Context(t)

	for _, id := range []string{"ses_1", "ses_2", "ses_3"} {
		if _, err := a.Create(ctx, record(id, "acme"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Create(ctx, record("ses_o", "other"), 0); err != nil {
		t.Fatal(err)
	}
	entry := func(p string) *session.Entry {
		return &session.Entry{Time: created, PromptID: p, Message: provider.Message{Role: provider.RoleUser,
			Content: []provider.Block{{Type: provider.BlockText, Text: p}}}}
	}
	start := func(st *Redis, id, tenant, p string, limit int) session.StartResult {
		t.Helper()
		res, err := st.Start(ctx, id, time.Minute, session.Run{PromptID: p, Replica: st.ReplicaID()}, entry(p),
			session.PromptSlot{Tenant: tenant, PromptID: p}, limit)
		if err != nil {
			t.Fatalf("Start %s (%s): %v", id, p, err)
		}
		return res
	}

	must(t, c.ScriptFlush(ctx).Err()) // both scripts of the pipeline NOSCRIPT
	if res := start(a, "ses_1", "acme", "p1", 2); !res.Started || res.Limited {
		t.Fatalf("Start 1 = %+v", res)
	}
	if res := start(b, "ses_2", "acme", "p2", 2); !res.Started {
		t.Fatalf("Start 2 = %+v", res)
	}
	if got := prompts(t, a, "acme"); !reflect.DeepEqual(got, []string{"p1", "p2"}) {
		t.Fatalf("slots = %v", got)
	}
	if ttl := c.PTTL(ctx, a.promptsKey("acme")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the slots' key expires in %v", ttl)
	}

	// At the limit: refused, and nothing of ses_3 changed.
	before, _, err := a.Load(ctx, "ses_3")
	must(t, err)
	res := start(b, "ses_3", "acme", "p3", 2)
	if want := (session.StartResult{Found: true, Limited: true, Prompts: 2}); !reflect.DeepEqual(res, want) {
		t.Fatalf("Start at the limit = %+v, want %+v", res, want)
	}
	after, _, err := a.Load(ctx, "ses_3")
	must(t, err)
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("record after a refused Start = %+v, was %+v", after, before)
	}
	if h, _ := a.Holder(ctx, "ses_3"); h != "" {
		t.Fatalf("a refused Start left a lease held by %q", h)
	}
	if _, ok, _ := a.LoadRun(ctx, "ses_3"); ok {
		t.Fatal("a refused Start left a run")
	}
	if ids, _ := a.Running(ctx); slices.Contains(ids, "ses_3") {
		t.Fatal("a refused Start left the session in the running set")
	}
	if _, total, _ := a.List(ctx, "ses_3", 0, 0); total != 0 {
		t.Fatalf("a refused Start left %d history entries", total)
	}
	if got := prompts(t, a, "acme"); len(got) != 2 {
		t.Fatalf("slots after a refused Start = %v", got)
	}
	// Another tenant is not concerned.
	if res := start(a, "ses_o", "other", "po", 2); !res.Started {
		t.Fatalf("Start of another tenant = %+v", res)
	}

	// A busy session: not started, and no slot left behind (the limit is
	// high enough for the slot to be taken).
	if res := start(b, "ses_1", "acme", "p1b", 5); res.Started || res.Limited || res.Holder != a.ReplicaID() {
		t.Fatalf("Start of a held session = %+v", res)
	}
	if got := prompts(t, a, "acme"); !reflect.DeepEqual(got, []string{"p1", "p2"}) {
		t.Fatalf("slots after the Start of a held session = %v", got)
	}
	// Both full and busy: busy.
	if res := start(b, "ses_1", "acme", "p1c", 2); res.Started || res.Limited || res.Holder != a.ReplicaID() {
		t.Fatalf("Start of a held session at the limit = %+v", res)
	}

	// Renew extends the slot.
	score := func(p string) float64 { return c.ZScore(ctx, a.promptsKey("acme"), p).Val() }
	s0 := score("p1")
	if ok, err := a.Renew(ctx, "ses_1", time.Hour, session.PromptSlot{Tenant: "acme", PromptID: "p1"}); !ok || err != nil {
		t.Fatalf("Renew = %v, %v", ok, err)
	}
	if s1 := score("p1"); s1 < s0+float64((time.Hour-time.Minute)/time.Millisecond) {
		t.Fatalf("slot after Renew: %v, was %v", s1, s0)
	}
	if ttl := c.PTTL(ctx, a.promptsKey("acme")).Val(); ttl <= time.Minute {
		t.Fatalf("the slots' key expires in %v after a Renew for an hour", ttl)
	}

	// Finish frees the slot: ses_3 starts.
	must(t, a.Finish(ctx, "ses_1", before.Mutable, session.Run{PromptID: "p1", Replica: a.ReplicaID(), Ending: true},
		session.PromptSlot{Tenant: "acme", PromptID: "p1"}))
	if got := prompts(t, a, "acme"); !reflect.DeepEqual(got, []string{"p2"}) {
		t.Fatalf("slots after Finish = %v", got)
	}
	must(t, a.EndRun(ctx, "ses_1", session.PromptSlot{Tenant: "acme", PromptID: "p1"}))
	if res := start(b, "ses_3", "acme", "p3", 2); !res.Started {
		t.Fatalf("Start after Finish = %+v", res)
	}
	// EndRun frees it too, but only for the lease's holder.
	must(t, a.EndRun(ctx, "ses_2", session.PromptSlot{Tenant: "acme", PromptID: "p2"}))
	if got := prompts(t, a, "acme"); !reflect.DeepEqual(got, []string{"p2", "p3"}) {
		t.Fatalf("slots after another replica's EndRun = %v", got)
	}
	must(t, b.EndRun(ctx, "ses_2", session.PromptSlot{Tenant: "acme", PromptID: "p2"}))
	if got := prompts(t, a, "acme"); !reflect.DeepEqual(got, []string{"p3"}) {
		t.Fatalf("slots after EndRun = %v", got)
	}

	// A slot past its time (a lost replica's) does not count.
	must(t, c.ZAdd(ctx, a.promptsKey("acme"), redis.Z{Score: 1, Member: "lost"}).Err())
	if res := start(a, "ses_1", "acme", "p4", 2); !res.Started {
		t.Fatalf("Start with an expired slot = %+v", res)
	}
	if got := prompts(t, a, "acme"); !reflect.DeepEqual(got, []string{"p3", "p4"}) {
		t.Fatalf("slots = %v", got)
	}
	// Occupy counts a taken-over prompt beyond the limit.
	must(t, b.Occupy(ctx, session.PromptSlot{Tenant: "acme", PromptID: "p5"}, time.Minute))
	if got := prompts(t, a, "acme"); len(got) != 3 {
		t.Fatalf("slots after Occupy = %v", got)
	}
}
