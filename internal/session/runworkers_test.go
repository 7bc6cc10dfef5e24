package session

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
)

// goroutineID is the calling goroutine's id, from its stack's header.
func goroutineID(t *testing.T) uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, err := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	if err != nil {
		t.Fatalf("goroutine id from %q: %v", buf[:], err)
	}
	return id
}

// A finished run's goroutine waits for the next run and takes it.
func TestRunWorkersReuseTheGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRunWorkers()
		defer w.close()
		ids := make(chan uint64, 2)
		w.start(func() { ids <- goroutineID(t) })
		first := <-ids
		synctest.Wait() // the worker waits for the next run
		if n := w.idle.Load(); n != 1 {
			t.Fatalf("waiting workers after a run: %d, want 1", n)
		}
		w.start(func() { ids <- goroutineID(t) })
		if second := <-ids; second != first {
			t.Fatalf("the second run ran on goroutine %d, the first on %d: the worker was not reused", second, first)
		}
		synctest.Wait()
		if n := w.idle.Load(); n != 1 {
			t.Fatalf("waiting workers after two runs: %d, want 1", n)
		}
	})
}

// Manager.Go runs a call on the goroutine a run left waiting (its stack
// grown already), which then waits for the next run again; after close it
// still runs the call, on a goroutine that then ends (synctest.Test fails
// if one is left).
func TestManagerGoRunsOnTheRunWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &Manager{workers: newRunWorkers()}
		ids := make(chan uint64, 1)
		m.workers.start(func() { growRunStack(padIndex); ids <- goroutineID(t) })
		run := <-ids
		synctest.Wait()
		m.Go(func() { ids <- goroutineID(t) })
		if call := <-ids; call != run {
			t.Fatalf("Go ran on goroutine %d, the run on %d: not on the waiting worker", call, run)
		}
		synctest.Wait()
		if n := m.workers.idle.Load(); n != 1 {
			t.Fatalf("waiting workers after Go: %d, want 1", n)
		}
		m.workers.close()
		synctest.Wait()
		m.Go(func() { ids <- goroutineID(t) })
		<-ids
	})
}

// Runs never wait for a worker: with every worker busy a run gets a
// goroutine of its own, and of the ones that finish only
// maxIdleRunWorkers stay.
func TestRunWorkersNeverQueueAndKeepABoundedFew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRunWorkers()
		defer w.close()
		const n = maxIdleRunWorkers + 36
		release := make(chan struct{})
		var running sync.WaitGroup
		running.Add(n)
		for range n {
			w.start(func() { running.Done(); <-release })
		}
		running.Wait() // all n run at once: none waited for another
		close(release)
		synctest.Wait()
		if got := w.idle.Load(); got != maxIdleRunWorkers {
			t.Fatalf("waiting workers after %d runs ended: %d, want %d", n, got, maxIdleRunWorkers)
		}
	})
}

// shed ends the waiting workers; later runs get new ones. close ends the
// rest: synctest.Test fails if a goroutine of the bubble is left.
func TestRunWorkersShedAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRunWorkers()
		done := make(chan struct{}, 3)
		for range 3 {
			w.start(func() { done <- struct{}{} })
		}
		for range 3 {
			<-done
		}
		synctest.Wait()
		w.shed()
		synctest.Wait()
		if n := w.idle.Load(); n != 0 {
			t.Fatalf("waiting workers after shed: %d, want 0", n)
		}
		w.start(func() { done <- struct{}{} })
		<-done
		synctest.Wait()
		if n := w.idle.Load(); n != 1 {
			t.Fatalf("waiting workers after a run past shed: %d, want 1", n)
		}
		w.close()
		// A run started after close still runs, on a goroutine that ends
		// with it.
		w.start(func() { done <- struct{}{} })
		<-done
	})
}

// A run on a waiting worker against a run on a goroutine of its own, each
// taking its stack to 32 KiB as a streaming run does (growRunStack).
func BenchmarkRunWorkersStart(b *testing.B) {
	b.Run("worker", func(b *testing.B) {
		w := newRunWorkers()
		defer w.close()
		done := make(chan struct{})
		for b.Loop() {
			w.start(func() { growRunStack(padIndex); done <- struct{}{} })
			<-done
		}
	})
	b.Run("goroutine", func(b *testing.B) {
		done := make(chan struct{})
		for b.Loop() {
			go func() { growRunStack(padIndex); done <- struct{}{} }()
			<-done
		}
	})
}

// Waiting workers keep their grown stacks through collections: 64 workers
// whose runs took their stacks to 32 KiB hold them after four more
// collections. Without waitForRun's pad (a 1 KiB one instead) the first
// collection halves them, the stacks in use falling by 600 KiB and more.
func TestRunWorkersKeepTheirStacks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newRunWorkers()
		defer w.close()
		var grown sync.WaitGroup
		release := make(chan struct{})
		grown.Add(maxIdleRunWorkers)
		for range maxIdleRunWorkers {
			w.start(func() { growRunStack(padIndex); grown.Done(); <-release })
		}
		grown.Wait()
		close(release)
		synctest.Wait() // every worker waits
		if n := w.idle.Load(); n != maxIdleRunWorkers {
			t.Fatalf("waiting workers: %d, want %d", n, maxIdleRunWorkers)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 4 {
			runtime.GC()
		}
		runtime.ReadMemStats(&after)
		// 64 stacks halved would free 1 MiB; the rest of the process's
		// goroutines are allowed a quarter of that.
		if before.StackInuse > after.StackInuse+256<<10 {
			t.Fatalf("stacks in use fell from %d to %d KiB over four collections: the waiting workers' stacks were shrunk",
				before.StackInuse>>10, after.StackInuse>>10)
		}
	})
}
