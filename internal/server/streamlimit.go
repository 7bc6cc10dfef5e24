package server

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// limitStreamsPerTenant is the configuration's name of streamSlots' bound:
// the error of a stream over it names it.
const limitStreamsPerTenant = "limits.max_streams_per_tenant"

// streamSlots bounds the event streams each tenant holds open on this
// replica (limits.max_streams_per_tenant). A follower costs a goroutine
// or two and its buffers for as long as it stays, so one tenant's readers
// must not take the memory every tenant's streams share. A stream belongs
// to the replica that serves its connection: the count is this
// replica's, with no store round trip.
type streamSlots struct {
	limit int

	mu   sync.Mutex
	open map[string]int // tenant → its streams open; no entry at 0
}

func newStreamSlots(limit int) *streamSlots {
	return &streamSlots{limit: limit, open: map[string]int{}}
}

// take reserves one of tenant's streams, which put gives back. Over the
// limit it is RESOURCE_EXHAUSTED naming the limit.
func (s *streamSlots) take(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.open[tenant]
	if s.limit > 0 && n >= s.limit {
		return status.Errorf(codes.ResourceExhausted,
			"%s: tenant has %d event streams open on this replica, the limit; close one before opening another", limitStreamsPerTenant, n)
	}
	s.open[tenant] = n + 1
	return nil
}

func (s *streamSlots) put(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.open[tenant] - 1; n > 0 {
		s.open[tenant] = n
	} else {
		delete(s.open, tenant)
	}
}
