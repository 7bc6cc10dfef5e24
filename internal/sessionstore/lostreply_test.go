package sessionstore

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// A write whose reply is lost (the connection drops after Redis ran it) is
// sent again by go-redis on a new connection: the second run must leave
// what one run leaves and answer as the first did. Each case loses the
// reply of one script, through a proxy in front of a real redis-server.
// With store.redis.min_replica_acks too, where the scripts that
// acknowledge run on their own connection with WAIT.
func TestLostReplyRunsOnce(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t)
	ctx := testkit.Context(t)
	rc := newClient(t, replica.Addr(), time.Second)
	must(t, rc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port())).Err())
	testkit.Eventually(t, "the replica in sync", func() bool {
		info, _ := rc.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	for _, acks := range []int{0, 1} {
		t.Run(fmt.Sprintf("acks=%d", acks), func(t *testing.T) {
			lostReplies(t, master.Addr(), Options{KeyPrefix: fmt.Sprintf("a%d:", acks), MinReplicaAcks: acks})
		})
	}
}

// evalMarks are parts of the source of scripts sent as EVAL.
var evalMarks = map[*redis.Script]string{endRunScript: "redis.call('DEL', KEYS[3], KEYS[1])"}

func lostReplies(t *testing.T, addr string, o Options) {
	direct := newClient(t, addr, time.Second)
	proxy := redistest.NewProxy(t, addr)
	s := newStore(t, newClient(t, proxy.Addr(), time.Second), o)
	ctx := testkit.Context(t)
	lose := func(script *redis.Script) { proxy.LoseScriptReply(ctx, script, evalMarks[script]) }
	lost := func() { proxy.WaitLost(ctx) }
	entry := func(prompt, text string) session.Entry {
		return session.Entry{Time: created, PromptID: prompt, Message: provider.Message{Role: provider.RoleUser,
			Content: []provider.Block{{Type: provider.BlockText, Text: text}}}}
	}
	history := func(id string) []string {
		t.Helper()
		es, _, err := s.List(ctx, id, 0, 100)
		must(t, err)
		var texts []string
		for _, e := range es {
			texts = append(texts, e.Message.Content[0].Text)
		}
		return texts
	}

	// append
	{
		_, err := s.Create(ctx, record("ses_a", "t1"), 0)
		must(t, err)
		for i := range 2 {
			if i == 1 {
				lose(appendScript)
			}
			idx, err := s.Append(ctx, "ses_a", entry("p1", "same"))
			if err != nil || idx != int64(i) {
				t.Fatalf("Append %d = %d, %v", i, idx, err)
			}
		}
		lost()
		// Two appends of equal entries are two entries; the lost reply's
		// second run is none.
		if got := history("ses_a"); fmt.Sprint(got) != "[same same]" {
			t.Fatalf("history = %q, want two entries", got)
		}
		if idx, err := s.Append(ctx, "ses_a", entry("p1", "next")); err != nil || idx != 2 {
			t.Fatalf("Append after = %d, %v", idx, err)
		}
	}

	// start
	{
		_, err := s.Create(ctx, record("ses_s", "t1"), 0)
		must(t, err)
		_, err = s.Append(ctx, "ses_s", entry("p0", "before"))
		must(t, err)
		lose(startScript)
		first := entry("p1", "the prompt")
		res, err := s.Start(ctx, "ses_s", time.Minute, session.Run{PromptID: "p1", Replica: s.ReplicaID()}, &first,
			session.PromptSlot{Tenant: "t1", PromptID: "p1"}, 1)
		lost()
		if err != nil || !res.Started || res.Holder != s.ReplicaID() || res.Record.MessageCount != 1 || res.Epoch == 0 {
			t.Fatalf("Start = %+v, %v; want it started with 1 entry before its own", res, err)
		}
		if got := history("ses_s"); fmt.Sprint(got) != "[before the prompt]" {
			t.Fatalf("history = %q", got)
		}
		// The lease is this replica's, with the epoch Start reported: its
		// fenced writes go through.
		if _, err := s.Append(ctx, "ses_s", entry("p1", "answer")); err != nil {
			t.Fatalf("Append under the lease = %v", err)
		}
		if ep, err := direct.Get(ctx, s.key("ses_s", "epoch")).Uint64(); err != nil || ep != res.Epoch {
			t.Fatalf("epoch = %d, %v; Start said %d", ep, err, res.Epoch)
		}
		// The end's reply lost too: the second run finds the run ended and
		// puts nothing back (no running entry, no prompt slot taken).
		lose(endRunScript)
		must(t, s.EndRun(ctx, "ses_s", session.PromptSlot{Tenant: "t1", PromptID: "p1"}))
		lost()
		if h, _ := s.Holder(ctx, "ses_s"); h != "" {
			t.Fatalf("lease held by %q after EndRun", h)
		}
		if ids, err := s.Running(ctx); err != nil || len(ids) != 0 {
			t.Fatalf("Running = %v, %v after EndRun", ids, err)
		}
		if n, err := direct.ZCard(ctx, s.promptsKey("t1")).Result(); err != nil || n != 0 {
			t.Fatalf("the tenant's prompt slots = %d, %v after EndRun", n, err)
		}
		// The tenant's one prompt slot is free: the next prompt starts.
		next := entry("p2", "again")
		if res, err := s.Start(ctx, "ses_s", time.Minute, session.Run{PromptID: "p2", Replica: s.ReplicaID()}, &next,
			session.PromptSlot{Tenant: "t1", PromptID: "p2"}, 1); err != nil || !res.Started {
			t.Fatalf("the next Start = %+v, %v", res, err)
		}
	}

	// acquire (a takeover's)
	{
		_, err := s.Create(ctx, record("ses_t", "t1"), 0)
		must(t, err)
		lose(acquireScript)
		ok, holder, err := s.Acquire(ctx, "ses_t", time.Minute)
		lost()
		if err != nil || !ok || holder != s.ReplicaID() {
			t.Fatalf("Acquire = %v, %q, %v; want it taken", ok, holder, err)
		}
		// Its fenced writes go through: the epoch is the one it took.
		must(t, s.SaveRun(ctx, "ses_t", session.Run{PromptID: "p1", Replica: s.ReplicaID()}))
		// Taken by this replica before, not by this call: not this call's.
		if ok, holder, err := s.Acquire(ctx, "ses_t", time.Minute); err != nil || ok || holder != s.ReplicaID() {
			t.Fatalf("a second Acquire = %v, %q, %v; want it held by this replica already", ok, holder, err)
		}
		must(t, s.EndRun(ctx, "ses_t", session.PromptSlot{}))
	}

	// create
	{
		lose(tenantAddScript)
		res, err := s.Create(ctx, record("ses_c1", "t2"), 1)
		lost()
		if err != nil || !res.Created || res.Sessions != 1 {
			t.Fatalf("Create = %+v, %v; want it created, the tenant's first", res, err)
		}
		if _, ok, err := s.Load(ctx, "ses_c1"); !ok || err != nil {
			t.Fatalf("Load = %v, %v", ok, err)
		}
		// The tenant is at its limit of 1 with that session alone.
		if res, err := s.Create(ctx, record("ses_c2", "t2"), 1); err != nil || res.Created || res.Sessions != 1 {
			t.Fatalf("second Create at the limit = %+v, %v", res, err)
		}
		if n, err := direct.ZCard(ctx, s.tenantKey("t2")).Result(); err != nil || n != 1 {
			t.Fatalf("tenant index holds %d, %v", n, err)
		}
	}

	// A control call to another replica (PUBLISH): a message published
	// twice is handled once, and the caller gets the first handling's
	// reply, not the second's.
	{
		owner := newStore(t, direct, Options{KeyPrefix: o.KeyPrefix})
		var handled sync.Map
		var calls atomic.Int32
		owner.Serve(func(_ context.Context, c session.Control) session.Reply {
			calls.Add(1)
			if _, again := handled.LoadOrStore(c.SessionID, true); again {
				return session.Reply{Err: session.ReplyInvalid, Field: "results", Msg: "no tool call is waiting"}
			}
			return session.Reply{}
		})
		proxy.LoseReply("submit_tool_results")
		rep, err := s.Call(ctx, owner.ReplicaID(), session.Control{Op: session.OpSubmitToolResults, SessionID: "ses_call",
			Results: []session.ToolResult{{CallID: "c1", Content: "out"}}})
		lost()
		if err != nil || rep.Err != "" {
			t.Fatalf("Call = %+v, %v; want the first handling's success", rep, err)
		}
		// The next call is handled as usual.
		rep, err = s.Call(ctx, owner.ReplicaID(), session.Control{Op: session.OpSubmitToolResults, SessionID: "ses_call"})
		if err != nil || rep.Err != session.ReplyInvalid {
			t.Fatalf("a second Call = %+v, %v; want the handler's refusal", rep, err)
		}
		must(t, owner.Close()) // its handlers have returned
		if n := calls.Load(); n != 2 {
			t.Fatalf("the handler ran %d times for 2 calls", n)
		}
	}
}

// On a Redis Cluster, agentd's scripted pipelines are not sent again by
// go-redis (noRetry): a script whose reply was lost runs again by
// agentd's own hand, within the call's time, and answers as one run would.
func TestLostReplyOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testkit.Context(t)
	proxies := map[string]*redistest.Proxy{}
	for _, addr := range cl.Addrs() {
		proxies[addr] = redistest.NewProxy(t, addr)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), ContextTimeoutEnabled: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if p := proxies[addr]; p != nil {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, Options{})
	lose := func(script *redis.Script) {
		t.Helper()
		for _, p := range proxies {
			p.LoseScriptReply(ctx, script)
		}
	}
	total := 0
	lost := func() {
		t.Helper()
		n := -total
		for _, p := range proxies {
			n += p.Lost()
			p.Disarm()
		}
		if total += n; n != 1 {
			t.Fatalf("%d replies lost, want 1", n)
		}
	}

	lose(tenantAddScript)
	if res, err := s.Create(ctx, record("ses_cl", "t1"), 1); err != nil || !res.Created {
		t.Fatalf("Create = %+v, %v; want it created", res, err)
	}
	lost()
	lose(startScript)
	first := session.Entry{Time: created, PromptID: "p1", Message: provider.Message{Role: provider.RoleUser,
		Content: []provider.Block{{Type: provider.BlockText, Text: "the prompt"}}}}
	res, err := s.Start(ctx, "ses_cl", time.Minute, session.Run{PromptID: "p1", Replica: s.ReplicaID()}, &first,
		session.PromptSlot{Tenant: "t1", PromptID: "p1"}, 1)
	lost()
	if err != nil || !res.Started || res.Record.MessageCount != 0 {
		t.Fatalf("Start = %+v, %v; want it started", res, err)
	}
	if _, total, err := s.List(ctx, "ses_cl", 0, 10); err != nil || total != 1 {
		t.Fatalf("history holds %d entries (%v), want the prompt's one", total, err)
	}
	lose(endRunScript)
	must(t, s.EndRun(ctx, "ses_cl", session.PromptSlot{Tenant: "t1", PromptID: "p1"}))
	lost()
	if h, _ := s.Holder(ctx, "ses_cl"); h != "" {
		t.Fatalf("lease held by %q after EndRun", h)
	}
	if ids, err := s.Running(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("Running = %v, %v after EndRun", ids, err)
	}
}

// A control call's reply lost on its way to the caller (the caller's
// pub/sub connection breaks as Redis delivers it, and go-redis subscribes
// again): the caller asks again, the owner answers again from what it
// answered, without running the handler a second time, and the call
// returns in about the store's timeout, not the handler's 30 s bound.
func TestControlReplyLostOnTheWay(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	caller := newStore(t, newClient(t, proxy.Addr(), time.Second), Options{Timeout: 300 * time.Millisecond})
	owner := newStore(t, newClient(t, srv.Addr(), time.Second), Options{})
	var calls atomic.Int32
	owner.Serve(func(_ context.Context, c session.Control) session.Reply {
		if c.Op == session.OpState {
			return session.Reply{State: &session.State{ID: c.SessionID, Status: "idle"}}
		}
		if calls.Add(1) > 1 {
			return session.Reply{Err: session.ReplyNotOwner, Msg: "no prompt to abort"}
		}
		return session.Reply{}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	proxy.CutOnPush(`"reply"`)
	rep, err := caller.Call(ctx, owner.ReplicaID(), session.Control{Op: session.OpAbort, SessionID: "ses_x", Cause: "user"})
	if err != nil || rep.Err != "" {
		t.Fatalf("Call = %+v, %v; want the first handling's success", rep, err)
	}
	if proxy.Lost() != 1 {
		t.Fatalf("%d messages cut, want the reply", proxy.Lost())
	}
	// A read asked again is answered again.
	proxy.CutOnPush(`"reply"`)
	rep, err = caller.Call(ctx, owner.ReplicaID(), session.Control{Op: session.OpState, SessionID: "ses_x"})
	if err != nil || rep.State == nil || rep.State.ID != "ses_x" || proxy.Lost() != 2 {
		t.Fatalf("Call state = %+v, %v (%d cut)", rep, err, proxy.Lost())
	}
	must(t, owner.Close())
	if n := calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times for one call", n)
	}
}

// A control call to a replica that is not subscribed when the call goes
// out (its pub/sub connection reconnecting) reaches it once it is: the
// call asks again until the reply comes, within twice the store's timeout.
func TestControlCallReachesAReplicaSubscribingLate(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testkit.Context(t)
	direct := newClient(t, srv.Addr(), time.Second)
	caller := newStore(t, direct, Options{Timeout: 2 * time.Second})
	type result struct {
		rep session.Reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := caller.Call(ctx, "rep_late", session.Control{Op: session.OpAbort, SessionID: "ses_x", Cause: "user"})
		done <- result{rep, err}
	}()
	// The call has gone out once, to no subscriber.
	redistest.Eventually(ctx, t, "the first PUBLISH", func(ctx context.Context) (bool, error) {
		info, err := direct.Info(ctx, "commandstats").Result()
		return strings.Contains(info, "cmdstat_publish:calls="), err
	})
	owner := newStore(t, direct, Options{ReplicaID: "rep_late"})
	owner.Serve(func(context.Context, session.Control) session.Reply { return session.Reply{} })
	r := <-done
	if r.err != nil || r.rep.Err != "" {
		t.Fatalf("Call = %+v, %v; want the late replica's answer", r.rep, r.err)
	}
}
