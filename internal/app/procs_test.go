package app

import (
	"context"
	"crypto/sha256"
	"math"
	"runtime/metrics"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// adaptProcs goes to one P after procsLowerAfter quiet intervals, back to
// the default on the first busy or slow one, keeps its state between the
// two thresholds, and leaves the default set when it stops.
func TestAdaptProcsFollowsTheLoad(t *testing.T) {
	const idle, between, busy = 0.05, 0.15, procsRaiseBusy
	var script []procsLoad
	add := func(n int, l procsLoad) {
		for range n {
			script = append(script, l)
		}
	}
	add(procsLowerAfter-1, procsLoad{busy: idle})                           // 1–19: quiet, not yet long enough
	add(1, procsLoad{busy: idle})                                           // 20: one P
	add(1, procsLoad{busy: between})                                        // 21: not enough to raise
	add(1, procsLoad{busy: busy})                                           // 22: back to the default
	add(procsLowerAfter-1, procsLoad{busy: idle})                           // 23–41
	add(1, procsLoad{busy: between})                                        // 42: not quiet: the count starts again
	add(procsLowerAfter, procsLoad{busy: idle})                             // 43–62: one P at 62
	add(1, procsLoad{slow: 2 * procsSlowShare})                             // 63: goroutines waited: the default
	add(procsLowerAfter-1, procsLoad{busy: idle, slow: 2 * procsSlowShare}) // 64–82: quiet CPU, slow waits: stays
	add(procsLowerAfter, procsLoad{busy: idle})                             // 83–102: one P at 102

	type call struct {
		interval int
		one      bool
	}
	want := []call{{20, true}, {22, false}, {62, true}, {63, false}, {102, true}, {len(script), false}}

	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		var got []call
		done := make(chan struct{})
		go func() {
			defer close(done)
			adaptProcs(ctx, procsEvery, func() procsLoad { n++; return script[n-1] },
				func(one bool) { got = append(got, call{n, one}) })
		}()
		for range script {
			time.Sleep(procsEvery)
			synctest.Wait()
		}
		cancel() // at one P: the default comes back
		<-done
		if !slices.Equal(got, want) {
			t.Errorf("adaptProcs set %v, want %v", got, want)
		}
	})
}

// At the default already, stopping sets nothing.
func TestAdaptProcsStopsAtTheDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		sets := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			adaptProcs(ctx, procsEvery, func() procsLoad { return procsLoad{busy: 1} }, func(bool) { sets++ })
		}()
		time.Sleep(10 * procsEvery)
		cancel()
		<-done
		if sets != 0 {
			t.Errorf("a busy process stopped after %d GOMAXPROCS changes, want 0", sets)
		}
	})
}

// The sampler reports an interval's CPU in CPUs and the share of its
// scheduling waits at or above procsSlowWait; its first read is the
// baseline.
func TestProcsSamplerReadsTheInterval(t *testing.T) {
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	var cpu time.Duration
	// Buckets: [0, 100µs), [100µs, 1ms), [1ms, 10ms), [10ms, +Inf).
	buckets := []float64{0, 100e-6, 1e-3, 10e-3, math.Inf(1)}
	counts := []uint64{0, 0, 0, 0}
	s := &procsSampler{
		now:   func() time.Time { return at },
		cpu:   func() time.Duration { return cpu },
		waits: func(h *metrics.Float64Histogram) { h.Buckets, h.Counts = buckets, slices.Clone(counts) },
	}
	if l := s.sample(); l != (procsLoad{}) {
		t.Errorf("first sample = %+v, want zero (the baseline)", l)
	}
	at = at.Add(100 * time.Millisecond)
	cpu += 30 * time.Millisecond
	counts = []uint64{90, 8, 1, 1} // 2 of 100 at 1 ms or more
	l := s.sample()
	if l.busy < 0.299 || l.busy > 0.301 || l.slow < 0.0199 || l.slow > 0.0201 {
		t.Errorf("sample after 30 ms of CPU in 100 ms, 2 of 100 waits ≥ 1 ms = %+v, want busy 0.3, slow 0.02", l)
	}
	at = at.Add(200 * time.Millisecond)
	cpu += 20 * time.Millisecond
	l = s.sample() // no wait counted since
	if l.busy < 0.099 || l.busy > 0.101 || l.slow != 0 {
		t.Errorf("sample after 20 ms of CPU in 200 ms, no wait = %+v, want busy 0.1, slow 0", l)
	}
}

// The real readers: the process's CPU time grows as it works, and the
// runtime has the scheduling-latency histogram the sampler reads.
func TestProcsReaders(t *testing.T) {
	before := processCPU()
	sum := sha256.Sum256([]byte("agentd"))
	for i := 0; processCPU()-before < 2*time.Millisecond; i++ {
		if i == 1e7 {
			t.Fatalf("processCPU() stayed at %v over 10^7 hashes", before)
		}
		sum = sha256.Sum256(sum[:])
	}
	var h metrics.Float64Histogram
	schedLatencies(&h)
	if len(h.Counts) == 0 || len(h.Buckets) != len(h.Counts)+1 {
		t.Fatalf("/sched/latencies:seconds: %d buckets for %d counts", len(h.Buckets), len(h.Counts))
	}
}
