package sessionstore

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

// startReplicated starts a master and a replica in sync with it: the
// replica, a client of it and a client of the master.
func startReplicated(t *testing.T) (replica *redistest.Server, rc, c redis.UniversalClient) {
	t.Helper()
	ctx := testkit.Context(t)
	master := redistest.Start(t)
	replica = redistest.Start(t)
	rc = newClient(t, replica.Addr(), time.Second)
	must(t, rc.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(master.Port())).Err())
	testkit.Eventually(t, "the replica in sync", func() bool {
		info, _ := rc.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	return replica, rc, newClient(t, master.Addr(), time.Second)
}

// With min_replica_acks, Create returns once a replica has the record and
// EndRun once it has the prompt's end (events, history, the run gone);
// without the replica both fail with ErrNotReplicated, and the session not
// replicated is taken back.
func TestMinReplicaAcks(t *testing.T) {
	ctx := testkit.Context(t)
	replica, rc, c := startReplicated(t)
	s := newStore(t, c, Options{MinReplicaAcks: 1, AckTimeout: 200 * time.Millisecond})

	res, err := s.Create(ctx, record("ses_ack", "acme"), 0)
	if err != nil || !res.Created {
		t.Fatalf("Create = %+v, %v", res, err)
	}
	// Acknowledged: the replica has it now, not eventually.
	if ok, err := rc.HExists(ctx, "t:{ses_ack}:meta", "record").Result(); !ok || err != nil {
		t.Fatalf("the replica has no record after Create: %v, %v", ok, err)
	}
	ok, _, err := s.Acquire(ctx, "ses_ack", time.Minute)
	if !ok || err != nil {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	must(t, s.SaveRun(ctx, "ses_ack", session.Run{PromptID: "p1", Replica: s.ReplicaID()}))
	_, err = s.Append(ctx, "ses_ack", session.Entry{Time: created})
	must(t, err)
	s.AppendEvent("ses_ack", event(1))
	must(t, s.Flush(ctx, "ses_ack"))
	must(t, s.EndRun(ctx, "ses_ack", session.PromptSlot{}))
	if n, _ := rc.Exists(ctx, "t:{ses_ack}:run", "t:{ses_ack}:lease").Result(); n != 0 {
		t.Errorf("the replica still has %d of the run's keys after EndRun", n)
	}
	if n, _ := rc.XLen(ctx, "t:{ses_ack}:events").Result(); n != 1 {
		t.Errorf("the replica has %d events after EndRun", n)
	}

	// The replica is gone: nothing is acknowledged.
	replica.Kill()
	testkit.Eventually(t, "the master sees no replica", func() bool {
		info, _ := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "connected_slaves:0")
	})
	start := time.Now()
	_, err = s.Create(ctx, record("ses_lone", "acme"), 0)
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Create without a replica = %v, want ErrNotReplicated", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Create took %v to fail", d)
	}
	if _, ok, err := s.Load(ctx, "ses_lone"); ok || err != nil {
		t.Errorf("the session not replicated is still there: %v, %v", ok, err)
	}
	if recs, _ := s.ListRecords(ctx, "acme", 0, 10); len(recs) != 1 || recs[0].ID != "ses_ack" {
		t.Errorf("the tenant lists %+v", recs)
	}
	ok, _, err = s.Acquire(ctx, "ses_ack", time.Minute)
	if !ok || err != nil {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	must(t, s.SaveRun(ctx, "ses_ack", session.Run{PromptID: "p2", Replica: s.ReplicaID()}))
	if err := s.EndRun(ctx, "ses_ack", session.PromptSlot{}); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("EndRun without a replica = %v, want ErrNotReplicated", err)
	}
	// The run did end on the master.
	if h, _ := s.Holder(ctx, "ses_ack"); h != "" {
		t.Errorf("holder %q after EndRun", h)
	}
	if ids, _ := s.Running(ctx); len(ids) != 0 {
		t.Errorf("running %v after EndRun", ids)
	}
}

// A WAIT longer than the client's read timeout is waited for: too few
// acknowledgements read as ErrNotReplicated within the ack timeout, not as
// an i/o timeout whose outcome is unknown.
func TestMinReplicaAcksWaitOutlastsTheReadTimeout(t *testing.T) {
	master := redistest.Start(t)
	ctx := testkit.Context(t)
	c := newClient(t, master.Addr(), 100*time.Millisecond)
	s := newStore(t, c, Options{Timeout: 3 * time.Second, MinReplicaAcks: 1, AckTimeout: 400 * time.Millisecond})
	_, err := s.Create(ctx, record("ses_slow_ack", "acme"), 0)
	if !errors.Is(err, ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas within 400ms") {
		t.Fatalf("Create without a replica, WAIT longer than the read timeout = %v, want ErrNotReplicated after the whole wait", err)
	}
	if _, ok, err := s.Load(ctx, "ses_slow_ack"); ok || err != nil {
		t.Errorf("the session not replicated is still there: %v, %v", ok, err)
	}
}

// With min_replica_acks a prompt's start (its lease, run and user message)
// is on the replica when Start returns, before any model call; without
// the replica Start fails with ErrNotReplicated and takes the start back
// whole: no lease, no run, the history, the running set and the tenant's
// prompt slots as they were, and the session free for the next prompt.
func TestMinReplicaAcksStart(t *testing.T) {
	ctx := testkit.Context(t)
	replica, rc, c := startReplicated(t)
	s := newStore(t, c, Options{MinReplicaAcks: 1, AckTimeout: 200 * time.Millisecond})
	const id = "ses_ack_start"
	if res, err := s.Create(ctx, record(id, "acme"), 0); err != nil || !res.Created {
		t.Fatalf("Create = %+v, %v", res, err)
	}

	first := &session.Entry{Time: created, PromptID: "p1", Message: provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hello"}}}}
	slot := session.PromptSlot{Tenant: "acme", PromptID: "p1"}
	res, err := s.Start(ctx, id, time.Minute, session.Run{PromptID: "p1", Replica: s.ReplicaID()}, first, slot, 4)
	if err != nil || !res.Started {
		t.Fatalf("Start = %+v, %v", res, err)
	}
	// Acknowledged: the replica has the start now, not eventually.
	if holder, _ := rc.Get(ctx, "t:{"+id+"}:lease").Result(); holder != s.ReplicaID() {
		t.Errorf("the replica's lease after Start = %q, want %q", holder, s.ReplicaID())
	}
	if n, _ := rc.Exists(ctx, "t:{"+id+"}:run").Result(); n != 1 {
		t.Error("the replica has no run after Start")
	}
	if n, _ := rc.LLen(ctx, "t:{"+id+"}:history").Result(); n != 1 {
		t.Errorf("the replica's history after Start holds %d entries, want the user message", n)
	}
	must(t, s.EndRun(ctx, id, slot))

	replica.Kill()
	testkit.Eventually(t, "the master sees no replica", func() bool {
		info, _ := c.Info(ctx, "replication").Result()
		return strings.Contains(info, "connected_slaves:0")
	})
	second := &session.Entry{Time: created, PromptID: "p2", Message: provider.Message{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "again"}}}}
	slot2 := session.PromptSlot{Tenant: "acme", PromptID: "p2"}
	if _, err := s.Start(ctx, id, time.Minute, session.Run{PromptID: "p2", Replica: s.ReplicaID()}, second, slot2, 4); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Start without a replica = %v, want ErrNotReplicated", err)
	}
	if h, err := s.Holder(ctx, id); h != "" || err != nil {
		t.Errorf("holder %q (%v) after a start not acknowledged", h, err)
	}
	if _, found, err := s.LoadRun(ctx, id); found || err != nil {
		t.Errorf("a run (%v, %v) after a start not acknowledged", found, err)
	}
	if n, _ := c.LLen(ctx, "t:{"+id+"}:history").Result(); n != 1 {
		t.Errorf("the history holds %d entries after a start not acknowledged, want 1 (the first prompt's)", n)
	}
	if ids, _ := s.Running(ctx); len(ids) != 0 {
		t.Errorf("running %v after a start not acknowledged", ids)
	}
	if n, _ := c.ZCard(ctx, s.promptsKey("acme")).Result(); n != 0 {
		t.Errorf("the tenant holds %d prompt slots after a start not acknowledged", n)
	}
	// Nothing is left to get in the way: without acknowledgements the
	// session starts its next prompt at once.
	plain := newStore(t, c, Options{})
	if res, err := plain.Start(ctx, id, time.Minute, session.Run{PromptID: "p3", Replica: plain.ReplicaID()}, nil, session.PromptSlot{}, 0); err != nil || !res.Started {
		t.Fatalf("Start without acknowledgements = %+v, %v", res, err)
	}
}
