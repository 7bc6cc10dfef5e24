package sessionstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/redisconn"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// No writer, listener or handler outlives its store, no client goroutine
// its test.
func TestMain(m *testing.M) {
	redistest.VerifyTestMain(m)
}

func newClient(t testing.TB, addr string, timeout time.Duration) redis.UniversalClient {
	t.Helper()
	c := redis.NewUniversalClient(redisconn.ClientOptions(&redis.UniversalOptions{Addrs: []string{addr}}, timeout))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newStore(t testing.TB, c redis.UniversalClient, o Options) *Redis {
	t.Helper()
	if o.KeyPrefix == "" {
		o.KeyPrefix = "t:"
	}
	s, err := NewRedis(c, o)
	if err != nil {
		t.Fatalf("NewRedis = %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// logBuf collects a store's log lines.
type logBuf struct{ testkit.LogBuffer }

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var created = time.Date(2026, 3, 4, 5, 6, 7, 890, time.UTC)

func record(id, tenant string) session.Record {
	return session.Record{
		ID: id, Tenant: tenant, Role: "coder", System: "be brief", Primary: "p/m1",
		Tools:   []provider.Tool{{Name: "grep", Description: "search", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Created: created,
		Mutable: session.Mutable{Model: "p/m1", Settings: retry.Settings{Enabled: true, MaxRetries: 3,
			BaseDelay: 2 * time.Second, FallbackChains: map[string][]string{"default": {"q/m2"}}}},
	}
}

func TestReplicaID(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	a := newStore(t, c, Options{})
	b := newStore(t, c, Options{})
	re := regexp.MustCompile(`^rep_[a-z2-7]{10}$`)
	if !re.MatchString(a.ReplicaID()) || a.ReplicaID() == b.ReplicaID() {
		t.Fatalf("replica ids %q, %q: want two distinct rep_ + 10 base32", a.ReplicaID(), b.ReplicaID())
	}
	if got := newStore(t, c, Options{ReplicaID: "r1"}).ReplicaID(); got != "r1" {
		t.Fatalf("ReplicaID = %q, want r1", got)
	}
	if _, err := NewRedis(c, Options{ReplicaID: "deleted"}); err == nil {
		t.Fatal(`NewRedis accepted the replica id "deleted"`)
	}
	plain := redistest.Client(t, srv.Addr())
	if _, err := NewRedis(plain, Options{}); err == nil {
		t.Fatal("NewRedis accepted a client without ContextTimeoutEnabled")
	}
}

func TestRecords(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	s := newStore(t, c, Options{KeyPrefix: "agentd:"})
	ctx := testkit.Context(t)

	// Two tenants, interleaved: orders increase over both.
	var acme, other []session.Record
	var last uint64
	for i := range 8 {
		tenant, list := "acme", &acme
		if i == 2 || i == 5 || i == 7 {
			tenant, list = "other", &other
		}
		rec := record(fmt.Sprintf("s%d", i), tenant)
		res, err := s.Create(ctx, rec, 0)
		must(t, err)
		order := res.Order
		if !res.Created || order <= last {
			t.Fatalf("Create %s: order %d after %d", rec.ID, order, last)
		}
		last = order
		rec.Order = order
		*list = append(*list, rec)
	}
	if len(acme) != 5 || len(other) != 3 {
		t.Fatalf("setup: %d acme, %d other", len(acme), len(other))
	}

	got, ok, err := s.Load(ctx, "s0")
	if err != nil || !ok || !reflect.DeepEqual(got, acme[0]) {
		t.Fatalf("Load s0 = %+v, %v, %v; want %+v", got, ok, err, acme[0])
	}
	if _, ok, err := s.Load(ctx, "nope"); ok || err != nil {
		t.Fatalf("Load nope = %v, %v; want not found", ok, err)
	}
	// The record's layout: meta hash with record and mutable.
	if n, err := c.HLen(ctx, "agentd:{s0}:meta").Result(); err != nil || n != 2 {
		t.Fatalf("HLEN agentd:{s0}:meta = %d, %v; want 2", n, err)
	}

	// Save changes what Load returns.
	m := session.Mutable{Model: "q/m2", Settings: acme[1].Settings,
		Fallback: &session.FallbackState{Role: "coder", Original: "p/m1", Pinned: true}}
	must(t, s.Save(ctx, "s1", m))
	// MessageCount and LastSeq come from the history and the events.
	for range 2 {
		_, err := s.Append(ctx, "s1", session.Entry{Message: provider.Message{Role: "user"}})
		must(t, err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		s.AppendEvent("s1", session.Event{Seq: seq, Type: session.EventMessageUpdate})
	}
	must(t, s.Flush(ctx, "s1"))
	want := acme[1]
	want.Mutable, want.MessageCount, want.LastSeq = m, 2, 3
	got, ok, err = s.Load(ctx, "s1")
	if err != nil || !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("Load s1 = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	acme[1] = want

	// Pagination per tenant.
	page := func(tenant string, after uint64, limit int) []session.Record {
		t.Helper()
		recs, err := s.ListRecords(ctx, tenant, after, limit)
		must(t, err)
		return recs
	}
	if p := page("acme", 0, 2); !reflect.DeepEqual(p, acme[:2]) {
		t.Fatalf("page 1 = %+v, want %+v", p, acme[:2])
	}
	if p := page("acme", acme[1].Order, 2); !reflect.DeepEqual(p, acme[2:4]) {
		t.Fatalf("page 2 = %+v, want %+v", p, acme[2:4])
	}
	if p := page("acme", acme[3].Order, 2); !reflect.DeepEqual(p, acme[4:]) {
		t.Fatalf("page 3 = %+v, want %+v", p, acme[4:])
	}
	if p := page("acme", acme[4].Order, 2); len(p) != 0 {
		t.Fatalf("page 4 = %+v, want none", p)
	}
	if p := page("other", 0, 10); !reflect.DeepEqual(p, other) {
		t.Fatalf("other = %+v, want %+v", p, other)
	}
	if p := page("nobody", 0, 10); len(p) != 0 {
		t.Fatalf("nobody = %+v", p)
	}

	// Remove drops every key and the index entry; an index entry whose
	// record is gone is skipped.
	rm := acme[2].ID
	must(t, s.SaveRun(ctx, rm, session.Run{PromptID: "p1", Replica: s.ReplicaID()}))
	_, _, err = s.Acquire(ctx, rm, time.Minute)
	must(t, err)
	must(t, s.Strip(ctx, rm, 0))
	_, err = s.Append(ctx, rm, session.Entry{})
	must(t, err)
	s.AppendEvent(rm, session.Event{Seq: 1})
	must(t, s.Flush(ctx, rm))
	must(t, s.Remove(ctx, rm, "acme"))
	keys := []string{"meta", "history", "appended", "stripped", "events", "lease", "run", "taker"}
	for _, k := range keys {
		if n := c.Exists(ctx, "agentd:{"+rm+"}:"+k).Val(); n != 0 {
			t.Errorf("after Remove: agentd:{%s}:%s exists", rm, k)
		}
	}
	if ids := c.SMembers(ctx, "agentd:sessions:running").Val(); slices.Contains(ids, rm) {
		t.Errorf("after Remove: running = %v", ids)
	}
	wantAll := slices.Delete(slices.Clone(acme), 2, 3)
	if p := page("acme", 0, 10); !reflect.DeepEqual(p, wantAll) {
		t.Fatalf("after Remove = %+v, want %+v", p, wantAll)
	}
	// Index entries without a record are skipped, and the page is filled
	// from beyond them.
	for i := range 3 {
		must(t, c.ZAdd(ctx, s.tenantKey("acme"), redis.Z{Score: float64(acme[0].Order) + 0.1*float64(i+1), Member: fmt.Sprint("ghost", i)}).Err())
	}
	if p := page("acme", 0, 2); !reflect.DeepEqual(p, wantAll[:2]) {
		t.Fatalf("with ghosts: %+v, want %+v", p, wantAll[:2])
	}
	if _, ok, err := s.Load(ctx, rm); ok || err != nil {
		t.Fatalf("Load removed = %v, %v", ok, err)
	}
	// Saving a removed session writes nothing.
	must(t, s.Save(ctx, rm, m))
	if n := c.Exists(ctx, "agentd:{"+rm+"}:meta").Val(); n != 0 {
		t.Fatal("Save of a removed session recreated its meta")
	}
	if !strings.HasPrefix(s.tenantKey("acme"), "agentd:tenant:") || len(s.tenantKey("acme")) != len("agentd:tenant:")+16+len(":sessions") {
		t.Fatalf("tenant key %q", s.tenantKey("acme"))
	}
}

func TestHistory(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr(), time.Second), Options{})
	ctx := testkit.Context(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var want []session.Entry
	for i := range 5 {
		e := session.Entry{Time: at.Add(time.Duration(i) * time.Second), PromptID: "p1",
			Message: provider.Message{Role: provider.RoleAssistant, Content: []provider.Block{{Type: provider.BlockText, Text: fmt.Sprint("m", i)}}}}
		if i == 2 {
			e.Message = provider.Message{Role: session.RoleModelChange}
			e.ModelChange = &session.ModelChange{From: "a", To: "b", Reason: "fallback"}
		}
		idx, err := s.Append(ctx, "h1", e)
		if err != nil || idx != int64(i) {
			t.Fatalf("Append %d = %d, %v", i, idx, err)
		}
		e.Index = int64(i)
		want = append(want, e)
	}
	list := func(offset, limit int) ([]session.Entry, int) {
		t.Helper()
		es, total, err := s.List(ctx, "h1", offset, limit)
		must(t, err)
		return es, total
	}
	if es, total := list(1, 2); total != 5 || !reflect.DeepEqual(es, want[1:3]) {
		t.Fatalf("List(1,2) = %+v, %d; want %+v, 5", es, total, want[1:3])
	}
	if es, total := list(0, 100); total != 5 || !reflect.DeepEqual(es, want) {
		t.Fatalf("List(0,100) = %+v, %d", es, total)
	}
	if es, total := list(4, 10); total != 5 || !reflect.DeepEqual(es, want[4:]) {
		t.Fatalf("List(4,10) = %+v, %d", es, total)
	}
	if es, total := list(10, 5); total != 5 || len(es) != 0 {
		t.Fatalf("List(10,5) = %+v, %d", es, total)
	}
	if es, total := list(0, 0); total != 5 || len(es) != 0 {
		t.Fatalf("List(0,0) = %+v, %d", es, total)
	}

	for _, i := range []int64{3, 1, 3} {
		must(t, s.Strip(ctx, "h1", i))
	}
	if got, err := s.Stripped(ctx, "h1"); err != nil || !slices.Equal(got, []int64{1, 3}) {
		t.Fatalf("Stripped = %v, %v; want [1 3]", got, err)
	}
	must(t, s.Delete(ctx, "h1"))
	if es, total := list(0, 10); total != 0 || len(es) != 0 {
		t.Fatalf("after Delete: %+v, %d", es, total)
	}
	if got, err := s.Stripped(ctx, "h1"); err != nil || len(got) != 0 {
		t.Fatalf("after Delete: Stripped = %v, %v", got, err)
	}
}

func TestLease(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	a := newStore(t, c, Options{})
	b := newStore(t, c, Options{})
	ctx := testkit.Context(t)

	// 20 goroutines of two replicas race: one wins, every other sees it.
	type result struct {
		ok     bool
		holder string
		err    error
	}
	results := make([]result, 20)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range results {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			<-start
			ok, holder, err := s.Acquire(ctx, "L", 10*time.Second)
			results[i] = result{ok, holder, err}
		})
	}
	close(start)
	wg.Wait()
	var winners []int
	for i, r := range results {
		must(t, r.err)
		if r.ok {
			winners = append(winners, i)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d goroutines acquired the lease: %+v", len(winners), results)
	}
	holder, loser := a, b
	if winners[0]%2 == 1 {
		holder, loser = b, a
	}
	for i, r := range results {
		if r.holder != holder.ReplicaID() {
			t.Fatalf("goroutine %d saw holder %q, want %q", i, r.holder, holder.ReplicaID())
		}
	}
	if h, err := loser.Holder(ctx, "L"); err != nil || h != holder.ReplicaID() {
		t.Fatalf("Holder = %q, %v", h, err)
	}

	// Only the holder renews or releases.
	if ok, err := loser.Renew(ctx, "L", time.Minute, session.PromptSlot{}); ok || err != nil {
		t.Fatalf("loser Renew = %v, %v", ok, err)
	}
	must(t, loser.Release(ctx, "L"))
	if h, _ := a.Holder(ctx, "L"); h != holder.ReplicaID() {
		t.Fatalf("after the loser's Release, holder = %q", h)
	}
	if ok, err := holder.Renew(ctx, "L", time.Minute, session.PromptSlot{}); !ok || err != nil {
		t.Fatalf("holder Renew = %v, %v", ok, err)
	}
	if pttl := c.PTTL(ctx, "t:{L}:lease").Val(); pttl <= 10*time.Second || pttl > time.Minute {
		t.Fatalf("PTTL after Renew = %v, want about 1m", pttl)
	}
	must(t, holder.Release(ctx, "L"))
	if h, err := a.Holder(ctx, "L"); h != "" || err != nil {
		t.Fatalf("after Release, Holder = %q, %v", h, err)
	}
	if ok, err := holder.Renew(ctx, "L", time.Minute, session.PromptSlot{}); ok || err != nil {
		t.Fatalf("Renew of a released lease = %v, %v", ok, err)
	}

	// A lease expires after its ttl; then another replica takes it.
	if ok, _, err := a.Acquire(ctx, "T", 50*time.Millisecond); !ok || err != nil {
		t.Fatalf("Acquire T = %v, %v", ok, err)
	}
	if pttl := c.PTTL(ctx, "t:{T}:lease").Val(); pttl <= 0 || pttl > 50*time.Millisecond {
		t.Fatalf("PTTL = %v, want within (0, 50ms]", pttl)
	}
	testkit.Eventually(t, "the lease expired and b took it", func() bool {
		ok, _, err := b.Acquire(ctx, "T", time.Minute)
		must(t, err)
		return ok
	})
	if ok, err := a.Renew(ctx, "T", time.Minute, session.PromptSlot{}); ok || err != nil {
		t.Fatalf("Renew of an expired lease = %v, %v", ok, err)
	}
	if ok, h, err := b.Acquire(ctx, "T", time.Minute); ok || h != b.ReplicaID() || err != nil {
		t.Fatalf("Acquire of a lease already held = %v, %q, %v; want false, self", ok, h, err)
	}
}

func TestRuns(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	s := newStore(t, c, Options{})
	o := newStore(t, c, Options{})
	ctx := testkit.Context(t)
	r1 := session.Run{PromptID: "p1", Replica: s.ReplicaID(), Attempt: 2,
		Due: time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC), Class: "rate_limit", DelaySource: "retry-after", Credential: "c1"}
	r2 := session.Run{PromptID: "p2", Replica: o.ReplicaID()}
	for id, st := range map[string]*Redis{"r1": s, "r2": o} {
		if ok, _, err := st.Acquire(ctx, id, time.Minute); !ok || err != nil {
			t.Fatalf("Acquire %s = %v, %v", id, ok, err)
		}
	}
	must(t, s.SaveRun(ctx, "r1", r1))
	must(t, o.SaveRun(ctx, "r2", r2))
	if got, ok, err := o.LoadRun(ctx, "r1"); !ok || err != nil || !reflect.DeepEqual(got, r1) {
		t.Fatalf("LoadRun = %+v, %v, %v", got, ok, err)
	}
	if ids, err := s.Running(ctx); err != nil || !slices.Equal(ids, []string{"r1", "r2"}) {
		t.Fatalf("Running = %v, %v", ids, err)
	}

	// Only the lease's holder ends a run; the run and the lease go together.
	must(t, o.EndRun(ctx, "r1", session.PromptSlot{}))
	if _, ok, err := s.LoadRun(ctx, "r1"); !ok || err != nil {
		t.Fatalf("LoadRun after another replica's EndRun = %v, %v", ok, err)
	}
	if h, _ := s.Holder(ctx, "r1"); h != s.ReplicaID() {
		t.Fatalf("holder after another replica's EndRun = %q", h)
	}
	must(t, s.EndRun(ctx, "r1", session.PromptSlot{}))
	if _, ok, err := s.LoadRun(ctx, "r1"); ok || err != nil {
		t.Fatalf("LoadRun after EndRun = %v, %v", ok, err)
	}
	if h, err := o.Holder(ctx, "r1"); h != "" || err != nil {
		t.Fatalf("holder after EndRun = %q, %v", h, err)
	}
	if ids, err := s.Running(ctx); err != nil || !slices.Equal(ids, []string{"r2"}) {
		t.Fatalf("Running = %v, %v", ids, err)
	}
	must(t, s.EndRun(ctx, "r1", session.PromptSlot{})) // nothing left: harmless
}

func event(seq uint64) session.Event {
	return session.Event{Seq: seq, Type: session.EventMessageUpdate, PromptID: "p1",
		Time: time.Date(2026, 1, 1, 0, 0, 0, int(seq), time.UTC), TextDelta: fmt.Sprint("d", seq), Delay: time.Duration(seq) * time.Millisecond,
		ToolCall: &session.ToolCall{CallID: "c", Name: "grep", Input: json.RawMessage(`{"q":"x"}`)}}
}

func seqs(es []session.Event) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func TestEvents(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	var logs logBuf
	a := newStore(t, c, Options{})
	b := newStore(t, c, Options{Logger: logs.logger()})
	ctx := testkit.Context(t)

	if err := a.Flush(ctx, "e1"); err != nil {
		t.Fatalf("Flush with nothing queued = %v", err)
	}
	for seq := uint64(1); seq <= 10; seq++ {
		a.AppendEvent("e1", event(seq))
	}
	must(t, a.Flush(ctx, "e1"))
	all, err := a.Events(ctx, "e1", 0, 100)
	must(t, err)
	if !slices.Equal(seqs(all), []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Fatalf("Events = %v", seqs(all))
	}
	want := event(7)
	want.SessionID = "e1"
	if !reflect.DeepEqual(all[6], want) {
		t.Fatalf("event 7 = %+v, want %+v", all[6], want)
	}
	if got, err := b.Events(ctx, "e1", 5, 3); err != nil || !slices.Equal(seqs(got), []uint64{6, 7, 8}) {
		t.Fatalf("Events(5,3) = %v, %v", seqs(got), err)
	}
	if got, err := b.Events(ctx, "e1", 10, 3); err != nil || len(got) != 0 {
		t.Fatalf("Events(10,3) = %v, %v", seqs(got), err)
	}
	if n, err := b.LastSeq(ctx, "e1"); n != 10 || err != nil {
		t.Fatalf("LastSeq = %d, %v", n, err)
	}
	if n, err := b.LastSeq(ctx, "none"); n != 0 || err != nil {
		t.Fatalf("LastSeq of nothing = %d, %v", n, err)
	}

	// A seq stored already is skipped (a batch written again after its
	// reply was lost), not an error; the newer one is stored.
	dup := event(5)
	dup.TextDelta = "dup"
	b.AppendEvent("e1", dup)
	b.AppendEvent("e1", event(11))
	must(t, b.Flush(ctx, "e1"))
	all, err = a.Events(ctx, "e1", 0, 100)
	must(t, err)
	if len(all) != 11 || all[4].TextDelta != "d5" || all[10].Seq != 11 {
		t.Fatalf("after the duplicate: %v, event 5 %q", seqs(all), all[4].TextDelta)
	}

	// Approximate trimming: a few hundred events in a stream of about 10.
	tr := newStore(t, c, Options{KeyPrefix: "trim:", EventBuffer: 10})
	for seq := uint64(1); seq <= 300; seq++ {
		tr.AppendEvent("e2", event(seq))
	}
	must(t, tr.Flush(ctx, "e2"))
	kept, err := tr.Events(ctx, "e2", 0, 1000)
	must(t, err)
	if len(kept) == 0 || kept[0].Seq <= 1 || kept[len(kept)-1].Seq != 300 || len(kept) >= 300 {
		t.Fatalf("after trimming: %d events, %v", len(kept), seqs(kept))
	}
	for i, e := range kept {
		if e.Seq != kept[0].Seq+uint64(i) {
			t.Fatalf("after trimming: not contiguous: %v", seqs(kept))
		}
	}
	if n, err := tr.LastSeq(ctx, "e2"); n != 300 || err != nil {
		t.Fatalf("LastSeq = %d, %v", n, err)
	}

	// Close writes what is queued.
	cl := newStore(t, c, Options{})
	for seq := uint64(1); seq <= 200; seq++ {
		cl.AppendEvent("e3", event(seq))
	}
	must(t, cl.Close())
	if n, err := a.LastSeq(ctx, "e3"); n != 200 || err != nil {
		t.Fatalf("after Close: LastSeq = %d, %v", n, err)
	}
	cl.AppendEvent("e3", event(201)) // dropped, no panic
	if err := cl.Flush(ctx, "e3"); err != nil {
		t.Fatalf("Flush after Close = %v", err)
	}
}

// The stream's entries are the events' compact objects (appendStoredEvent);
// an entry of json.Marshal's whole object, as a replica wrote it before
// (during a rolling upgrade, both are in one stream), reads back the same.
func TestEventEntries(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	s := newStore(t, c, Options{})
	ctx := testkit.Context(t)

	delta := session.Event{Seq: 1, Type: session.EventMessageUpdate, PromptID: "p1",
		Time: time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC), TextDelta: "hello"}
	s.AppendEvent("e1", delta)
	must(t, s.Flush(ctx, "e1"))
	raw, err := c.XRange(ctx, s.key("e1", "events"), "-", "+").Result()
	must(t, err)
	want, err := appendStoredEvent(nil, &delta)
	must(t, err)
	if len(raw) != 1 || raw[0].ID != "1-0" || raw[0].Values["e"] != string(want) {
		t.Fatalf("stream = %v, want one entry 1-0 of %s", raw, want)
	}

	// Seq 2 as the replicas before wrote it, then seq 3 as they do now.
	whole := event(2)
	whole.SessionID = "e1"
	data, err := json.Marshal(whole)
	must(t, err)
	must(t, c.XAdd(ctx, &redis.XAddArgs{Stream: s.key("e1", "events"), ID: "2-0", Values: []any{"e", data}}).Err())
	s.AppendEvent("e1", event(3))
	must(t, s.Flush(ctx, "e1"))
	got, err := s.Events(ctx, "e1", 0, 10)
	must(t, err)
	delta.SessionID = "e1"
	third := event(3)
	third.SessionID = "e1"
	if len(got) != 3 || !reflect.DeepEqual(got[0], delta) || !reflect.DeepEqual(got[1], whole) || !reflect.DeepEqual(got[2], third) {
		t.Fatalf("Events =\n%+v\nwant\n%+v", got, []session.Event{delta, whole, third})
	}
}

// Many sessions appending concurrently: every Flush returns once its own
// events are stored.
func TestEventsConcurrent(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr(), time.Second), Options{})
	ctx := testkit.Context(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			id := fmt.Sprint("c", i)
			for seq := uint64(1); seq <= 50; seq++ {
				s.AppendEvent(id, event(seq))
				if seq%10 == 0 {
					if err := s.Flush(ctx, id); err != nil {
						t.Error(err)
						return
					}
					if n, err := s.LastSeq(ctx, id); n != seq || err != nil {
						t.Errorf("%s: LastSeq after Flush = %d, %v; want %d", id, n, err, seq)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if len(s.w.pending) != 0 || len(s.w.queue) != 0 {
		t.Fatalf("writer left %d pending sessions, %d queued events", len(s.w.pending), len(s.w.queue))
	}
}

// expectSignal waits (bounded) for a signal on ch.
func expectSignal(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatal("follower channel closed, want a signal")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no signal within 5s")
	}
}

func expectNoSignal(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case _, ok := <-ch:
		t.Fatalf("unexpected signal (open %v)", ok)
	default:
	}
}

// follow is Follow with its notifications on a channel (closed when the
// session is removed), as the session engine's followers took them.
func follow(s *Redis, id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	stop := s.Follow(id, func(removed bool) {
		if removed {
			close(ch) // once: the store forgets a removed session's follower
			return
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return ch, stop
}

func okHandler(_ context.Context, c session.Control) session.Reply {
	return session.Reply{State: &session.State{ID: c.SessionID}}
}

func TestFollow(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	a := newStore(t, c, Options{})
	b := newStore(t, c, Options{})
	b.Serve(okHandler)
	ctx := testkit.Context(t)
	_, err := a.Create(ctx, record("f1", "acme"), 0)
	must(t, err)

	// barrier returns once b's listener has handled every message
	// published to it before: the control message comes after them on
	// the same connection.
	barrier := func() {
		t.Helper()
		if _, err := a.Call(ctx, b.ReplicaID(), session.Control{Op: session.OpState}); err != nil {
			t.Fatalf("barrier call: %v", err)
		}
	}

	sig, stop := follow(b, "f1")
	a.AppendEvent("f1", event(1))
	must(t, a.Flush(ctx, "f1"))
	expectSignal(t, sig)

	// b's own events do not signal b.
	b.AppendEvent("f1", event(2))
	must(t, b.Flush(ctx, "f1"))
	barrier()
	expectNoSignal(t, sig)

	// Signals coalesce.
	for seq := uint64(3); seq <= 5; seq++ {
		a.AppendEvent("f1", event(seq))
		must(t, a.Flush(ctx, "f1"))
	}
	barrier()
	expectSignal(t, sig)
	expectNoSignal(t, sig)

	// Remove closes the channel; stop is harmless afterwards, twice.
	must(t, a.Remove(ctx, "f1", "acme"))
	select {
	case _, ok := <-sig:
		if ok {
			t.Fatal("signal instead of close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follower channel was not closed within 5s of Remove")
	}
	stop()
	stop()

	// After stop: no signal, and b no longer subscribes to the channel.
	sig2, stop2 := follow(b, "f2")
	stop2()
	a.AppendEvent("f2", event(1))
	must(t, a.Flush(ctx, "f2"))
	barrier()
	expectNoSignal(t, sig2)
	testkit.Eventually(t, "b unsubscribed", func() bool {
		n := c.PubSubNumSub(ctx, b.notifyChannel("f2"), b.notifyChannel("f1")).Val()
		return n[b.notifyChannel("f2")] == 0 && n[b.notifyChannel("f1")] == 0
	})

	// A second Follow replaces the first; the first's stop leaves the
	// second subscribed.
	old, stopOld := follow(b, "f3")
	cur, stopCur := follow(b, "f3")
	defer stopCur()
	stopOld()
	a.AppendEvent("f3", event(1))
	must(t, a.Flush(ctx, "f3"))
	expectSignal(t, cur)
	expectNoSignal(t, old)
}

func TestCall(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	a := newStore(t, c, Options{})
	b := newStore(t, c, Options{})
	ctx := testkit.Context(t)
	release := make(chan struct{})
	defer close(release)
	var got sync.Map
	b.Serve(func(ctx context.Context, c session.Control) session.Reply {
		got.Store(c.SessionID, c)
		switch c.Op {
		case session.OpState:
			return session.Reply{State: &session.State{ID: c.SessionID, Status: "idle", LastSeq: 7}}
		case session.OpAbort:
			return session.Reply{Err: session.ReplyNotOwner, Msg: "not mine: " + c.Cause}
		case session.OpAbortRetry:
			select {
			case <-ctx.Done():
			case <-release:
			}
			return session.Reply{}
		case "panic":
			panic("boom")
		}
		return session.Reply{Err: session.ReplyInvalid, Field: "op"}
	})

	rep, err := a.Call(ctx, b.ReplicaID(), session.Control{Op: session.OpState, SessionID: "s1"})
	if err != nil || rep.Err != "" || rep.State == nil || rep.State.ID != "s1" || rep.State.LastSeq != 7 {
		t.Fatalf("Call state = %+v, %v", rep, err)
	}
	sent := session.Control{Op: session.OpSubmitToolResults, SessionID: "s2", Enabled: true,
		Results: []session.ToolResult{{CallID: "c1", Content: "out", IsError: true}}}
	if rep, err := a.Call(ctx, b.ReplicaID(), sent); err != nil || rep.Err != session.ReplyInvalid || rep.Field != "op" {
		t.Fatalf("Call submit = %+v, %v", rep, err)
	}
	if v, _ := got.Load("s2"); !reflect.DeepEqual(v, sent) {
		t.Fatalf("the handler got %+v, want %+v", v, sent)
	}
	rep, err = a.Call(ctx, b.ReplicaID(), session.Control{Op: session.OpAbort, SessionID: "s3", Cause: "user"})
	if err != nil || rep.Err != session.ReplyNotOwner || rep.Msg != "not mine: user" {
		t.Fatalf("Call abort = %+v, %v", rep, err)
	}
	rep, err = a.Call(ctx, b.ReplicaID(), session.Control{Op: "panic"})
	if err != nil || rep.Err != session.ReplyOther {
		t.Fatalf("Call to a panicking handler = %+v, %v", rep, err)
	}

	// Concurrent calls each get their own reply.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			id := fmt.Sprint("c", i)
			rep, err := a.Call(ctx, b.ReplicaID(), session.Control{Op: session.OpState, SessionID: id})
			if err != nil || rep.State == nil || rep.State.ID != id {
				t.Errorf("concurrent call %s = %+v, %v", id, rep, err)
			}
		})
	}
	wg.Wait()

	// A call to self works too.
	if rep, err := b.Call(ctx, b.ReplicaID(), session.Control{Op: session.OpState, SessionID: "me"}); err != nil || rep.State.ID != "me" {
		t.Fatalf("Call to self = %+v, %v", rep, err)
	}

	if _, err := a.Call(ctx, "rep_nobody", session.Control{Op: session.OpState}); !errors.Is(err, session.ErrNoReplica) {
		t.Fatalf("Call to nobody = %v, want ErrNoReplica", err)
	}

	// A blocked handler: the call ends with its ctx.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = a.Call(cctx, b.ReplicaID(), session.Control{Op: session.OpAbortRetry, SessionID: "s4"})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Call to a blocked handler = %v after %v", err, time.Since(start))
	}

	// A replica that has not called Serve yet answers "not ready".
	n := newStore(t, c, Options{})
	rep, err = a.Call(ctx, n.ReplicaID(), session.Control{Op: session.OpState})
	if err != nil || rep.Err != session.ReplyOther || rep.Msg != "replica not ready" {
		t.Fatalf("Call before Serve = %+v, %v", rep, err)
	}

	must(t, a.Close())
	if _, err := a.Call(ctx, b.ReplicaID(), session.Control{Op: session.OpState}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Call after Close = %v", err)
	}
}

// The writer's queue stays bounded; what it dropped is Flush's error, and
// what it kept is written once Redis is back.
func TestQueueBound(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv.Addr(), 200*time.Millisecond), Options{Timeout: 200 * time.Millisecond, maxQueue: 10})
	ctx := testkit.Context(t)
	srv.Kill()
	for seq := uint64(1); seq <= 1000; seq++ {
		s.AppendEvent("q", event(seq))
		s.w.mu.Lock()
		n := len(s.w.queue)
		s.w.mu.Unlock()
		if n > 10 {
			t.Fatalf("queue holds %d events, bound 10", n)
		}
	}
	if err := s.Flush(ctx, "q"); err == nil {
		t.Fatal("Flush with Redis down = nil")
	}
	srv.Start()
	testkit.Eventually(t, "the kept events stored", func() bool { return s.Flush(ctx, "q") == nil })
	if n, err := s.LastSeq(ctx, "q"); n != 1000 || err != nil {
		t.Fatalf("LastSeq once Redis is back = %d, %v; want 1000 (the newest events kept)", n, err)
	}
}

// With Redis down every operation fails within its timeout, nothing
// hangs, and Close returns; once Redis is back the store works again.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 200 * time.Millisecond
	c := newClient(t, srv.Addr(), timeout)
	a := newStore(t, c, Options{Timeout: timeout})
	b := newStore(t, c, Options{Timeout: timeout})
	b.Serve(okHandler)
	ctx := testkit.Context(t)
	_, err := a.Create(ctx, record("d1", "acme"), 0)
	must(t, err)
	sig, stop := follow(b, "d1")
	defer stop()

	srv.Kill()
	ops := map[string]func() error{
		"Create": func() error { _, err := a.Create(ctx, record("d2", "acme"), 0); return err },
		"Load":   func() error { _, _, err := a.Load(ctx, "d1"); return err },
		"List": func() error {
			_, err := a.ListRecords(ctx, "acme", 0, 10)
			return err
		},
		"Save":    func() error { return a.Save(ctx, "d1", session.Mutable{}) },
		"Append":  func() error { _, err := a.Append(ctx, "d1", session.Entry{}); return err },
		"History": func() error { _, _, err := a.List(ctx, "d1", 0, 10); return err },
		"Strip":   func() error { return a.Strip(ctx, "d1", 1) },
		"Acquire": func() error { _, _, err := a.Acquire(ctx, "d1", time.Second); return err },
		"Renew":   func() error { _, err := a.Renew(ctx, "d1", time.Second, session.PromptSlot{}); return err },
		"Holder":  func() error { _, err := a.Holder(ctx, "d1"); return err },
		"SaveRun": func() error { return a.SaveRun(ctx, "d1", session.Run{}) },
		"Running": func() error { _, err := a.Running(ctx); return err },
		"Events":  func() error { _, err := a.Events(ctx, "d1", 0, 10); return err },
		"LastSeq": func() error { _, err := a.LastSeq(ctx, "d1"); return err },
		"Call": func() error {
			_, err := a.Call(ctx, b.ReplicaID(), session.Control{Op: session.OpState})
			return err
		},
		"Flush": func() error {
			a.AppendEvent("d1", event(1))
			return a.Flush(ctx, "d1")
		},
		"Remove": func() error { return a.Remove(ctx, "d1", "acme") },
	}
	for name, op := range ops {
		start := time.Now()
		err := op()
		if err == nil {
			t.Errorf("%s with Redis down = %v", name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s with Redis down took %v", name, d)
		}
	}
	start := time.Now()
	_, stopX := follow(a, "dx")
	stopX()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Follow with Redis down took %v", d)
	}
	if _, err := NewRedis(c, Options{Timeout: timeout}); err == nil {
		t.Error("NewRedis with Redis down = nil error")
	}

	// Back: requests work again, and go-redis subscribes b again.
	srv.Start()
	testkit.Eventually(t, "Load works again", func() bool {
		_, _, err := a.Load(ctx, "d1")
		return err == nil
	})
	// (A reply published before a's own subscription is back is lost:
	// each try is bounded.)
	testkit.Eventually(t, "b answers calls again", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := a.Call(cctx, b.ReplicaID(), session.Control{Op: session.OpState})
		return err == nil
	})
	// The restarted Redis lost everything (no persistence): b's follow of
	// d1 was subscribed again with the control channel.
	testkit.Eventually(t, "b follows d1 again", func() bool {
		return c.PubSubNumSub(ctx, b.notifyChannel("d1")).Val()[b.notifyChannel("d1")] == 1
	})
	for len(sig) > 0 {
		<-sig
	}
	a.AppendEvent("d1", event(1))
	// Each Flush waits at most the store's 200 ms; the writer, back from
	// its failures, stores the event on its next try.
	testkit.Eventually(t, "d1's event stored", func() bool { return a.Flush(ctx, "d1") == nil })
	expectSignal(t, sig)

	// Down again, with events queued: Close returns anyway.
	srv.Kill()
	for seq := uint64(2); seq <= 50; seq++ {
		a.AppendEvent("d1", event(seq))
	}
	start = time.Now()
	_ = a.Close()
	_ = b.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close with Redis down took %v", d)
	}
}

// Start takes the lease, stores the run and reads the record in one step;
// it changes nothing of a session held elsewhere or gone; Finish saves the
// record's mutable part and the run together. Both work after the server
// forgot its scripts (NOSCRIPT).
func TestStartAndFinish(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	a := newStore(t, c, Options{})
	b := newStore(t, c, Options{})
	ctx := testkit.Context(t)

	if res, err := a.Start(ctx, "ses_none", time.Minute, session.Run{PromptID: "p0", Replica: a.ReplicaID()}, &session.Entry{PromptID: "p0"}, session.PromptSlot{}, 0); err != nil || !reflect.DeepEqual(res, session.StartResult{}) {
		t.Fatalf("Start of a missing session = %+v, %v", res, err)
	}
	if h, _ := a.Holder(ctx, "ses_none"); h != "" {
		t.Fatalf("a missing session got a lease held by %q", h)
	}
	if _, total, _ := a.List(ctx, "ses_none", 0, 0); total != 0 {
		t.Fatalf("a missing session got %d entries", total)
	}
	if _, ok, _ := a.LoadRun(ctx, "ses_none"); ok {
		t.Fatal("a missing session got a run")
	}

	rec := record("ses_s", "t1")
	_, err := a.Create(ctx, rec, 0)
	must(t, err)
	for i := range 3 {
		_, err := a.Append(ctx, "ses_s", session.Entry{Time: created, Message: provider.Message{Role: provider.RoleUser,
			Content: []provider.Block{{Type: provider.BlockText, Text: fmt.Sprint(i)}}}})
		must(t, err)
	}
	a.AppendEvent("ses_s", event(7))
	must(t, a.Flush(ctx, "ses_s"))
	want, _, err := a.Load(ctx, "ses_s")
	must(t, err)
	if want.MessageCount != 3 || want.LastSeq != 7 {
		t.Fatalf("Load = %+v", want)
	}

	must(t, c.ScriptFlush(ctx).Err())
	run := session.Run{PromptID: "p1", Replica: a.ReplicaID()}
	first := session.Entry{Time: created, PromptID: "p1", Message: provider.Message{Role: provider.RoleUser,
		Content: []provider.Block{{Type: provider.BlockText, Text: "the prompt"}}}}
	res, err := a.Start(ctx, "ses_s", time.Minute, run, &first, session.PromptSlot{}, 0)
	if err != nil || !res.Found || !res.Started || res.Holder != a.ReplicaID() || !reflect.DeepEqual(res.Record, want) {
		t.Fatalf("Start = %+v, %v; want the record %+v", res, err, want)
	}
	// The entry went to the end of the history, after the count Start read.
	entries, total, err := b.List(ctx, "ses_s", 3, 10)
	if err != nil || total != 4 || len(entries) != 1 || entries[0].Index != 3 || entries[0].PromptID != "p1" ||
		entries[0].Message.Content[0].Text != "the prompt" {
		t.Fatalf("history after Start = %+v (%d), %v", entries, total, err)
	}
	if h, _ := b.Holder(ctx, "ses_s"); h != a.ReplicaID() {
		t.Fatalf("holder = %q", h)
	}
	if got, ok, err := b.LoadRun(ctx, "ses_s"); !ok || err != nil || got != run {
		t.Fatalf("LoadRun = %+v, %v, %v", got, ok, err)
	}
	if ids, err := b.Running(ctx); err != nil || !slices.Contains(ids, "ses_s") {
		t.Fatalf("Running = %v, %v", ids, err)
	}

	// Unappend takes back only the last entry, at its index.
	must(t, a.Unappend(ctx, "ses_s", 2))
	if _, total, _ := b.List(ctx, "ses_s", 0, 0); total != 4 {
		t.Fatalf("Unappend of an entry that is not the last: %d entries", total)
	}
	must(t, a.Unappend(ctx, "ses_s", 3))
	if entries, total, _ := b.List(ctx, "ses_s", 0, 10); total != 3 || entries[2].Message.Content[0].Text != "2" {
		t.Fatalf("after Unappend: %d entries %+v", total, entries)
	}
	if _, err := a.Append(ctx, "ses_s", first); err != nil {
		t.Fatal(err)
	}

	// Held by a: b's Start names a and changes nothing.
	res, err = b.Start(ctx, "ses_s", time.Minute, session.Run{PromptID: "p2", Replica: b.ReplicaID()}, &first, session.PromptSlot{}, 0)
	if err != nil || !res.Found || res.Started || res.Holder != a.ReplicaID() {
		t.Fatalf("Start while held = %+v, %v", res, err)
	}
	if _, total, _ := b.List(ctx, "ses_s", 0, 0); total != 4 {
		t.Fatalf("a Start that took nothing appended: %d entries", total)
	}
	if got, _, _ := b.LoadRun(ctx, "ses_s"); got != run {
		t.Fatalf("run after another replica's Start = %+v", got)
	}

	// Finish: the mutable part and the ending run.
	must(t, c.ScriptFlush(ctx).Err())
	m := rec.Mutable
	m.Model = "q/m2"
	m.Fallback = &session.FallbackState{Role: "coder", Original: "p/m1"}
	ending := session.Run{PromptID: "p1", Replica: a.ReplicaID(), Ending: true}
	must(t, a.Finish(ctx, "ses_s", m, ending, session.PromptSlot{}))
	if got, _, _ := b.Load(ctx, "ses_s"); !reflect.DeepEqual(got.Mutable, m) {
		t.Fatalf("mutable after Finish = %+v", got.Mutable)
	}
	if got, _, _ := b.LoadRun(ctx, "ses_s"); got != ending {
		t.Fatalf("run after Finish = %+v", got)
	}
	must(t, a.EndRun(ctx, "ses_s", session.PromptSlot{}))
	res, err = b.Start(ctx, "ses_s", time.Minute, session.Run{PromptID: "p2", Replica: b.ReplicaID()}, nil, session.PromptSlot{}, 0)
	if err != nil || !res.Started || res.Record.Model != "q/m2" || res.Record.MessageCount != 4 {
		t.Fatalf("Start after EndRun = %+v, %v", res, err)
	}
}

// StartAlso's extra commands carry their own errors: another store's
// script the server does not have (NOSCRIPT) leaves the start done, its
// reply telling its caller to run it again.
func TestStartAlsoOtherScriptUnknown(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), time.Second)
	a := newStore(t, c, Options{})
	ctx := testkit.Context(t)
	_, err := a.Create(ctx, record("ses_also", "t1"), 0)
	must(t, err)
	// The start script is known to the server (loaded by a first start).
	_, err = a.Start(ctx, "ses_also", time.Minute, session.Run{PromptID: "p0"}, nil, session.PromptSlot{}, 0)
	must(t, err)
	must(t, a.EndRun(ctx, "ses_also", session.PromptSlot{}))
	unknown := redis.NewScript("return 'never loaded " + fmt.Sprint(time.Now().UnixNano()) + "'")
	var other *redis.Cmd
	res, err := a.StartAlso(ctx, "ses_also", time.Minute, session.Run{PromptID: "p1"}, nil, session.PromptSlot{}, 0,
		func(ctx context.Context, pipe redis.Pipeliner) {
			other = unknown.EvalSha(ctx, pipe, []string{"t:{ses_also}:x"})
		})
	if err != nil || !res.Started {
		t.Fatalf("StartAlso = %+v, %v", res, err)
	}
	if !isNoScript(other.Err()) {
		t.Fatalf("the other script's reply = %v, want NOSCRIPT", other.Err())
	}
}
