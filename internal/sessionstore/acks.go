package sessionstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated: fewer replicas than Options.MinReplicaAcks confirmed
// a write within Options.AckTimeout. The write may survive a failover or
// not; a Create that fails so is taken back.
var ErrNotReplicated = errors.New("not acknowledged by enough replicas")

// ackScript: KEYS[1] meta → 1 when the session's record is there (and a
// counter of the meta hash is bumped, a write of this connection that WAIT
// then covers), 0 when it is not.
var ackScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'record') == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'acks', 1)
return 1
`)

// ackStartScript: KEYS[1] lease, [2] epoch, [3] meta; ARGV[1] replica,
// [2] the lease's epoch → 1, the meta hash's counter bumped (a write of
// this connection that WAIT then covers), when the lease is still that
// one; the FENCED error when it is not.
var ackStartScript = redis.NewScript(fenceCheck + `
redis.call('HINCRBY', KEYS[3], 'acks', 1)
return 1
`)

// ackTimeout is WAIT's timeout: Options.AckTimeout, or half the store's
// timeout (WAIT runs in a pipeline whose reply the client reads within its
// read timeout, which is the store's).
func (r *Redis) ackTimeout() time.Duration {
	if r.o.AckTimeout > 0 {
		return r.o.AckTimeout
	}
	return max(r.o.Timeout/2, time.Millisecond)
}

// master is the client that runs commands on the master of key's slot: the
// store's own, or in a Cluster the node client of that master (WAIT counts
// the replicas of the node it runs on, and the acknowledgement of the writes
// of the connection it runs on).
func (r *Redis) master(ctx context.Context, key string) (redis.UniversalClient, error) {
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return r.c, nil
}

// replicated runs queue's commands on the master of key's slot, then WAIT
// Options.MinReplicaAcks, in one pipeline (one connection: WAIT waits for
// that connection's writes). The writes queued must be on key's slot: as
// every earlier write of that slot went to the same master before them, the
// replicas that acknowledge them have those too (unless a failover came in
// between, which the queued script of Create checks). It returns
// ErrNotReplicated (wrapped) when fewer replicas answered in time.
//
// In a Cluster the pipeline runs on a node client, which follows no
// redirection: when the slot has moved (MOVED) or is moving (ASK,
// TRYAGAIN: a reshard) or the Cluster is down for it, the queued commands
// did not run, and they run again once the slot map is reloaded, until
// ctx ends. queue is called for each attempt (the commands of the last
// one hold the replies).
func (r *Redis) replicated(ctx context.Context, key string, queue func(pipe redis.Pipeliner)) error {
	for backoff := 8 * time.Millisecond; ; backoff = min(2*backoff, 128*time.Millisecond) {
		err := r.replicatedOnce(ctx, key, queue)
		cc, ok := r.c.(*redis.ClusterClient)
		if err == nil || !ok || !slotElsewhere(err) {
			return err
		}
		cc.ReloadState(ctx)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// slotElsewhere reports a reply of a Cluster node that did not run the
// command because the slot is not (only) its own: MOVED, ASK, TRYAGAIN,
// CLUSTERDOWN.
func slotElsewhere(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, p := range []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN"} {
		if strings.HasPrefix(re.Error(), p) {
			return true
		}
	}
	return false
}

func (r *Redis) replicatedOnce(ctx context.Context, key string, queue func(pipe redis.Pipeliner)) error {
	node, err := r.master(ctx, key)
	if err != nil {
		return err
	}
	// WAIT never outlasts ctx: a deadline that would cut it off mid-wait
	// (an i/o timeout, the write's outcome unknown) shortens it instead, so
	// that too few acknowledgements read as ErrNotReplicated.
	bound := r.ackTimeout()
	if dl, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(dl)*3/4)
	}
	if c, ok := node.(*redis.Client); ok && bound >= c.Options().ReadTimeout {
		// A pipeline's replies are read within the client's read timeout,
		// which a longer WAIT would outlast (an i/o timeout, the outcome
		// unknown): this pipeline's is the wait's and the client's own.
		node = c.WithTimeout(bound + c.Options().ReadTimeout)
	}
	pipe := node.Pipeline()
	queue(pipe)
	wait := pipe.Do(ctx, "wait", r.o.MinReplicaAcks, max(bound.Milliseconds(), 1)) // 0 would wait forever
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if n, _ := wait.Int64(); n < int64(r.o.MinReplicaAcks) {
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, r.o.MinReplicaAcks, bound.Round(time.Millisecond))
	}
	return nil
}

// ackCreate makes sure, with Options.MinReplicaAcks, that the record of a
// session just created is on that many replicas; when it is not, the
// session is taken back (its record and its tenant index entry) and the
// error says why: a session is acknowledged only once replicated.
func (r *Redis) ackCreate(ctx context.Context, id, tenant string) error {
	if r.o.MinReplicaAcks <= 0 {
		return nil
	}
	meta := r.key(id, "meta")
	var found *redis.Cmd
	err := r.replicated(ctx, meta, func(pipe redis.Pipeliner) {
		found = ackScript.Eval(ctx, pipe, []string{meta})
	})
	if err == nil {
		if n, ferr := found.Int64(); ferr != nil {
			err = ferr
		} else if n != 1 {
			err = errors.New("the record is gone from the slot's master (a failover lost it)")
		}
	}
	if err == nil {
		return nil
	}
	uctx, ucancel := r.op(context.WithoutCancel(ctx))
	defer ucancel()
	pipe := r.c.Pipeline()
	pipe.Del(uctx, meta)
	pipe.ZRem(uctx, r.tenantKey(tenant), id)
	if _, uerr := pipe.Exec(uctx); uerr != nil {
		r.log.Warn("session store: a session not replicated left its record behind", "session", id, "err", uerr)
	}
	return wrap("create "+id, err)
}

// ackStart makes sure, with Options.MinReplicaAcks, that a prompt's start
// (its lease, its run, its user message: the session's slot, written by
// the start's script) is on that many replicas before its model call. It
// costs a round trip of its own (the start's pipeline may span hash slots,
// and WAIT counts one connection's writes) and the replicas' time to
// confirm; nil without Options.MinReplicaAcks.
func (r *Redis) ackStart(ctx context.Context, id string, epoch uint64) error {
	if r.o.MinReplicaAcks <= 0 {
		return nil
	}
	keys := []string{r.key(id, "lease"), r.key(id, "epoch"), r.key(id, "meta")}
	return r.replicated(ctx, keys[0], func(pipe redis.Pipeliner) {
		ackStartScript.Eval(ctx, pipe, keys, r.id, strconv.FormatUint(epoch, 10))
	})
}

// endRun runs endRunScript and WAIT (Options.MinReplicaAcks) on the same
// connection: a prompt's end (its run dropped, after its events were
// flushed and its history and state saved, all on the session's slot) is on
// that many replicas, or ackErr says it is not. n is the script's reply (1:
// this replica held the lease and ended the run, 2: the run had ended).
func (r *Redis) endRun(ctx context.Context, id string) (n int64, ackErr, err error) {
	keys := []string{r.key(id, "lease"), r.key(id, "epoch"), r.key(id, "run")}
	replica, epoch := r.leaseArgs(id)
	r.fences.drop(id)
	var end *redis.Cmd
	werr := r.replicated(ctx, keys[0], func(pipe redis.Pipeliner) {
		end = endRunScript.Eval(ctx, pipe, keys, replica, epoch)
	})
	if end == nil {
		return 0, nil, werr // no node to run it on
	}
	if n, err = end.Int64(); err != nil {
		return 0, nil, err
	}
	if werr != nil && n >= 1 {
		r.log.Error("session store: the end of a prompt is not on store.redis.min_replica_acks replicas (a failover now could lose it)",
			"session", id, "err", werr)
		return n, wrap("end run of "+id, werr), nil
	}
	return n, nil, nil
}
