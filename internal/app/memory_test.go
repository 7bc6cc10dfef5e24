package app

import (
	"context"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestLoadDropped(t *testing.T) {
	for _, tc := range []struct {
		load, peak int
		want       bool
	}{
		{0, 100000, true}, {40000, 100000, true}, {60000, 100000, false}, {0, 999, false}, {600, 1500, false}, {500, 1500, true},
	} {
		if got := loadDropped(tc.load, tc.peak); got != tc.want {
			t.Errorf("loadDropped(%d, peak %d) = %v", tc.load, tc.peak, got)
		}
	}
}

func TestShouldReclaim(t *testing.T) {
	for _, tc := range []struct {
		free, live uint64
		want       bool
	}{
		{free: 1 << 30, live: 34 << 20, want: true},     // after the load: a gigabyte free, the heap small
		{free: 200 << 20, live: 400 << 20, want: false}, // under load: the collector reuses its pages
		{free: 32 << 20, live: 1 << 20, want: false},    // little to give back
		{free: reclaimMinFree, live: reclaimMinFree - 1, want: true},
	} {
		if got := shouldReclaim(tc.free, tc.live); got != tc.want {
			t.Errorf("shouldReclaim(%d MiB free, %d MiB live) = %v", tc.free>>20, tc.live>>20, got)
		}
	}
}

// The reclaimer checks every interval, releases only when shouldReclaim
// says so, and stops with its context.
func TestReclaimMemoryChecksAndStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var free atomic.Uint64
		var n, load atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			reclaimMemory(ctx, time.Second, func() (uint64, uint64) { return free.Load(), 10 << 20 }, func() int { return int(load.Load()) },
				func() { n.Add(1); free.Store(0) })
		}()
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		if n.Load() != 0 {
			t.Fatalf("released %d times with nothing free", n.Load())
		}
		free.Store(1 << 30)
		time.Sleep(time.Second)
		synctest.Wait()
		if n.Load() != 1 {
			t.Fatalf("released %d times after a load, want 1", n.Load())
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n.Load() != 1 {
			t.Fatalf("released %d times with nothing left free, want 1", n.Load())
		}
		// A load that grows and then halves: a release.
		load.Store(5000)
		time.Sleep(time.Second)
		synctest.Wait()
		load.Store(2000)
		time.Sleep(time.Second)
		synctest.Wait()
		if n.Load() != 2 {
			t.Fatalf("released %d times after the load halved, want 2", n.Load())
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n.Load() != 2 {
			t.Fatalf("released %d times with the load steady, want 2", n.Load())
		}
		cancel()
		<-done
	})
}

// The runtime metrics the reclaimer reads exist (a renamed one would read
// as zero and never fire).
func TestReclaimSamplesExist(t *testing.T) {
	known := map[string]bool{}
	for _, d := range metrics.All() {
		known[d.Name] = true
	}
	for _, name := range reclaimSamples {
		if !known[name] {
			t.Errorf("runtime/metrics has no %s", name)
		}
	}
	if free, live := heapPages(); live == 0 {
		t.Errorf("heapPages = %d free, %d live: the live heap reads as zero", free, live)
	}
}
