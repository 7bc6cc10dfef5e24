package session

import (
	"sync"
	"sync/atomic"
)

// runWorkers runs the prompts' runs on goroutines kept from one run to the
// next. A run's goroutine streams on a 32 KiB stack (growStack), and a new
// goroutine for every run paid for that every prompt: its stack copied as
// it grew, twice (at the model call, then where the provider answered),
// and a 32 KiB stack taken from the heap and given back as it ended
// (together ≈ 3 % of agentd's CPU at 300 prompts/s over gRPC, in
// capacity's profile). A worker keeps its grown stack: paired against a
// goroutine per run in the bench's overhead scenario (3 rounds, twice),
// CPU per prompt 0.981× and 0.960×, added TTFT 0.952× and 0.961× over
// REST+SSE, 1.008× and 0.954× over gRPC.
//
// A run is handed to a waiting worker, or to a new one when none waits
// (there is no queue: a run never waits for a worker). Up to
// maxIdleRunWorkers wait at once (≤ 2 MiB of stacks); one more ends
// instead. A worker waits inside a frame of idleWaitBytes, so that the
// collector, which halves a waiting goroutine's stack when it uses less
// than a quarter of it, leaves a 32 KiB stack as it is. shed ends the
// waiting workers (the reclaimer calls it when the load has halved, with
// its release of the heap's free pages), close ends them all for good.
type runWorkers struct {
	// work is unbuffered: a send succeeds only when a worker waits.
	work chan func()
	idle atomic.Int32
	done chan struct{}
	once sync.Once
}

const (
	maxIdleRunWorkers = 64
	// idleWaitBytes is more than a quarter of a run's 32 KiB stack.
	idleWaitBytes = 9 << 10
)

func newRunWorkers() *runWorkers {
	return &runWorkers{work: make(chan func()), done: make(chan struct{})}
}

// start runs f on a waiting worker, or on a new one.
func (w *runWorkers) start(f func()) {
	select {
	case w.work <- f:
	default:
		go w.serve(f)
	}
}

// serve runs f, then the runs handed to it while it waits, until it is
// shed, closed or one too many waits.
func (w *runWorkers) serve(f func()) {
	for f != nil {
		// f is dead past its call: a waiting worker's frames hold nothing
		// of its last run (TestDeletedSessionsRetainNothing).
		f()
		if w.idle.Add(1) > maxIdleRunWorkers {
			w.idle.Add(-1)
			return
		}
		f = waitForRun(w.work, w.done, padIndex)
		w.idle.Add(-1)
	}
}

// waitForRun waits for a worker's next run: nil when the worker is to
// end. Its pad keeps a waiting worker's stack from being shrunk (see
// runWorkers); i is an index the compiler cannot know, so that it keeps
// the array.
//
//go:noinline
func waitForRun(work <-chan func(), done <-chan struct{}, i int) func() {
	var pad [idleWaitBytes]byte
	pad[i%idleWaitBytes] = 1
	var f func()
	select {
	case f = <-work:
	case <-done:
	}
	if pad[(i+1)%idleWaitBytes] != 0 {
		return nil // never: pad[i+1] is 0
	}
	return f
}

// shed ends the workers waiting now.
func (w *runWorkers) shed() {
	for {
		select {
		case w.work <- nil:
		default:
			return
		}
	}
}

// close ends every worker: the waiting ones now, the others after their
// run. Runs started after it still run, each on a goroutine of its own.
func (w *runWorkers) close() { w.once.Do(func() { close(w.done) }) }
