package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// readyz answers /readyz:
//   - 503 "draining" once the server drains;
//   - 503 "not ready: the store cannot write: <why>" while a write probe
//     of the Redis store fails (READONLY, MOVED, CLUSTERDOWN, a timeout…):
//     sessions cannot be created nor prompts run then;
//   - 200 "ready (degraded: …)" while the probe's write is acknowledged by
//     fewer replicas than store.redis.min_replica_acks asks (new sessions
//     and prompts of that master are refused, everything else is served),
//     or while the credential store serves from its local view (Redis
//     unreachable for its sync, yet the probe wrote). Either is a fault of
//     the fleet's store, which a replica leaving rotation would not help;
//   - 200 "ready".
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	short, err := s.storeWritable(ctx)
	if err != nil {
		http.Error(w, "not ready: the store cannot write: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	var degraded []string
	if short != nil {
		degraded = append(degraded, short.Error())
	}
	if err := s.creds.Ready(ctx); err != nil {
		// The shared store is unreachable and agentd serves from its
		// local view; the agentd_store_degraded metric says so too.
		degraded = append(degraded, err.Error())
	}
	if len(degraded) > 0 {
		fmt.Fprintln(w, "ready (degraded: "+strings.Join(degraded, "; ")+")")
		return
	}
	fmt.Fprintln(w, "ready")
}

// storeDegraded is a probe's error that leaves the store writable, short
// of what it should be (redisconn.ShortOfReplicasError).
type storeDegraded interface{ StoreDegraded() bool }

// storeWritable is the Redis store's write probe (redisconn: a SET with a
// short TTL on every master, its answer kept for a second), nil with the
// memory store: err when the store cannot write, short when it writes but
// too few replicas acknowledge. It sets agentd_store_writable and
// agentd_store_replicas_short.
func (s *Server) storeWritable(ctx context.Context) (short, err error) {
	if s.store != nil {
		err = s.store.Writable(ctx)
	}
	if d := storeDegraded(nil); errors.As(err, &d) && d.StoreDegraded() {
		short, err = err, nil
	}
	s.metrics.StoreWritable.Set(flag(err == nil))
	s.metrics.StoreReplicasShort.Set(flag(short != nil))
	return short, err
}

// flag is a gauge's 1 or 0.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
