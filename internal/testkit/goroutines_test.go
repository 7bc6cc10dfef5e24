package testkit

import (
	"fmt"
	"testing"
)

func parked(stop <-chan struct{}, ready chan<- struct{}) {
	ready <- struct{}{}
	<-stop
}

func TestGoroutinesCountsOnlyTheNamedCode(t *testing.T) {
	const prefix = "github.com/agentd/agentd/internal/testkit.parked"
	before := Goroutines(prefix)
	if before != 0 {
		t.Fatalf("%d parked goroutines before any was started", before)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	for range 5 {
		go parked(stop, ready)
		<-ready
	}
	if n := Goroutines(prefix); n != 5 {
		t.Fatalf("Goroutines = %d with 5 parked; want 5", n)
	}
	close(stop)
	EventuallyErr(t, "the parked goroutines ended", func() error {
		if n := Goroutines(prefix); n != 0 {
			return fmt.Errorf("%d parked goroutines left", n)
		}
		return nil
	})
}
