package app

import (
	"context"
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"
)

// Adaptive GOMAXPROCS. At a light load, a Go server with several
// processors (Ps) pays for them on every request: each goroutine made
// runnable while a P is idle wakes another thread to look for it
// (runtime.wakep), which spins on another CPU, often takes the goroutine
// there away from the caches that hold its data, and holds a CPU the
// process's peers (the provider, the client, on a small machine) wait
// for. On agentd's prompt path (the HTTP handler, the run, the provider
// transport's writer, the event readers) that is several hand-offs per
// prompt before the first token. Measured one prompt at a time on 2 CPUs
// (BENCHMARKS.md), agentd at one P spends 0.81× the CPU per prompt and
// adds 0.85× the time to first token that it does at two.
//
// So while the process uses little CPU, agentd runs on one P, and it goes
// back to the runtime's default (every CPU, or the container's CPU limit)
// as soon as one P is not enough:
//
//   - every procsEvery it reads the process's CPU time (getrusage) and the
//     runtime's scheduling latencies (how long runnable goroutines waited
//     for a P, /sched/latencies:seconds);
//   - on one P, an interval that used procsRaiseBusy of a CPU or more, or
//     in which more than procsSlowShare of the goroutines that ran waited
//     procsSlowWait or longer, restores the default at once;
//   - at the default, procsLowerAfter intervals in a row under
//     procsLowerBusy of a CPU (and without slow waits) go back to one P.
//
// The gap between the two thresholds and the delay before lowering keep a
// steady load from switching back and forth (a switch stops the world,
// briefly). One P would save CPU at a moderate load too (≈ 0.8× the
// CPU per prompt at 300 prompts/s on 2 CPUs), but there it costs latency:
// from about 0.3 of a CPU on, more than procsSlowShare of the goroutines
// wait procsSlowWait or longer for the one P, so the thresholds stay low.
// An operator who sets GOMAXPROCS in the environment keeps it: agentd
// serve adapts only when the variable is unset.
const (
	procsEvery      = 100 * time.Millisecond
	procsRaiseBusy  = 0.2 // of one CPU, over an interval on one P: back to the default
	procsLowerBusy  = 0.1 // of one CPU: below it for procsLowerAfter intervals, one P
	procsLowerAfter = 20  // intervals (2 s)
	procsSlowWait   = time.Millisecond
	procsSlowShare  = 0.01
)

// procsLoad is one interval's load.
type procsLoad struct {
	// busy is the CPU the process used, in CPUs (0.5: half of one).
	busy float64
	// slow is the share of the goroutine scheduling waits of procsSlowWait
	// or longer (0 when none was counted).
	slow float64
}

// adaptProcs samples the load every interval until ctx is done, and sets
// one P (set(true)) or the default (set(false)) as the load asks. It
// starts at the default and leaves the default set when it returns.
func adaptProcs(ctx context.Context, every time.Duration, sample func() procsLoad, set func(one bool)) {
	t := time.NewTicker(every)
	defer t.Stop()
	one, quiet := false, 0
	for {
		select {
		case <-ctx.Done():
			if one {
				set(false)
			}
			return
		case <-t.C:
		}
		l := sample()
		switch {
		case one:
			if l.busy >= procsRaiseBusy || l.slow > procsSlowShare {
				set(false)
				one, quiet = false, 0
			}
		case l.busy < procsLowerBusy && l.slow <= procsSlowShare:
			if quiet++; quiet >= procsLowerAfter {
				set(true)
				one = true
			}
		default:
			quiet = 0
		}
	}
}

// setProcs sets one P, or restores the runtime's default (which also
// resumes its own updates when a container's CPU limit changes).
func setProcs(one bool) {
	if one {
		runtime.GOMAXPROCS(1)
		return
	}
	runtime.SetDefaultGOMAXPROCS()
}

// procsSampler reads the load since its last read.
type procsSampler struct {
	now     func() time.Time
	cpu     func() time.Duration // the process's CPU time so far
	waits   func(*metrics.Float64Histogram)
	lastAt  time.Time
	lastCPU time.Duration
	last    []uint64 // the latency histogram's counts at the last read
}

func newProcsSampler() *procsSampler {
	s := &procsSampler{now: time.Now, cpu: processCPU, waits: schedLatencies}
	s.sample() // the baseline
	return s
}

func (s *procsSampler) sample() procsLoad {
	at, cpu := s.now(), s.cpu()
	var h metrics.Float64Histogram
	s.waits(&h)
	var l procsLoad
	if wall := at.Sub(s.lastAt); !s.lastAt.IsZero() && wall > 0 {
		l.busy = float64(cpu-s.lastCPU) / float64(wall)
	}
	if len(s.last) == len(h.Counts) {
		var all, slow uint64
		for i, c := range h.Counts {
			n := c - s.last[i]
			all += n
			if h.Buckets[i] >= procsSlowWait.Seconds() {
				slow += n
			}
		}
		if all > 0 {
			l.slow = float64(slow) / float64(all)
		}
	}
	s.lastAt, s.lastCPU = at, cpu
	s.last = append(s.last[:0], h.Counts...)
	return l
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedLatencies reads how long goroutines waited, runnable, for a P.
func schedLatencies(h *metrics.Float64Histogram) {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindFloat64Histogram {
		*h = *s[0].Value.Float64Histogram()
	}
}

// startAdaptiveProcs runs adaptProcs on the process until stop is called,
// which restores the runtime's default. It does nothing on a machine (or
// container) of one CPU.
func startAdaptiveProcs() (stop func()) {
	if runtime.GOMAXPROCS(0) < 2 {
		return func() {}
	}
	sample := newProcsSampler().sample
	return runBackground(func(ctx context.Context) { adaptProcs(ctx, procsEvery, sample, setProcs) })
}
