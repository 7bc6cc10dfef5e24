package server

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// readyz answers /readyz:
//   - 503 "draining" once the server drains;
//   - 503 "not ready: the store cannot write: <why>" while a write probe
//     of the Redis store fails (READONLY, MOVED, CLUSTERDOWN, a timeout…):
//     sessions cannot be created nor prompts run then;
//   - 200 "ready (degraded: …)" while the credential store serves from its
//     local view (Redis unreachable for its sync, yet the probe wrote: a
//     replica leaving rotation would not help);
//   - 200 "ready".
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.storeWritable(ctx); err != nil {
		http.Error(w, "not ready: the store cannot write: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if err := s.creds.Ready(ctx); err != nil {
		// Degraded: the shared store is unreachable and agentd serves
		// from its local view. Still ready (every replica would leave
		// rotation at once otherwise); the body and the
		// agentd_store_degraded metric say so.
		fmt.Fprintln(w, "ready (degraded: "+err.Error()+")")
		return
	}
	fmt.Fprintln(w, "ready")
}

// storeWritable is the Redis store's write probe (redisconn: a SET with a
// short TTL on every master, its answer kept for a second), nil with the
// memory store; it sets agentd_store_writable.
func (s *Server) storeWritable(ctx context.Context) error {
	if s.store == nil {
		s.metrics.StoreWritable.Set(1)
		return nil
	}
	err := s.store.Writable(ctx)
	if err != nil {
		s.metrics.StoreWritable.Set(0)
	} else {
		s.metrics.StoreWritable.Set(1)
	}
	return err
}
