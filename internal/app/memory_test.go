package app

import (
	"context"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/anthropic"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
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
		var n, shed, load atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			reclaimMemory(ctx, time.Second, func() (uint64, uint64) { return free.Load(), 10 << 20 }, func() int { return int(load.Load()) },
				func() { shed.Add(1) }, func() { n.Add(1); free.Store(0) })
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
		if shed.Load() != 1 {
			t.Fatalf("shed the idle connections %d times, want once: when the load halved (not for free pages alone)", shed.Load())
		}
		// The check after a shed releases once more: what the closed
		// connections freed as their goroutines ended.
		time.Sleep(time.Second)
		synctest.Wait()
		if n.Load() != 3 {
			t.Fatalf("released %d times the check after the shed, want 3", n.Load())
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n.Load() != 3 || shed.Load() != 1 {
			t.Fatalf("released %d times, shed %d, with the load steady, want 3 and 1", n.Load(), shed.Load())
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

// closeIdleConnections closes a provider client's kept-alive connection:
// the call after it dials anew.
func TestCloseIdleConnectionsRedials(t *testing.T) {
	s := providertest.NewServer(providertest.Options{})
	defer s.Close()
	c := anthropic.New(anthropic.Options{BaseURL: s.URL})
	defer c.CloseIdleConnections()
	providers := []session.Provider{{Name: "anthropic", Client: c}, {Name: "sim", Client: simProvider{sim.New(sim.Options{})}}}
	call := func() {
		t.Helper()
		req := &provider.Request{Model: "claude-sonnet-4-5", Credential: provider.Credential{ID: "k", Secret: "sk-test"},
			Messages: []provider.Message{{Role: provider.RoleUser, Content: []provider.Block{{Type: provider.BlockText, Text: "hi"}}}}}
		if res := c.Stream(testkit.Context(t), req, nil); res.Message.StopReason != provider.StopEnd {
			t.Fatalf("call: %+v", res.Message)
		}
	}
	call()
	call()
	closeIdleConnections(providers)
	call()
	reqs, err := s.WaitRequests(testkit.Context(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].RemoteAddr != reqs[1].RemoteAddr {
		t.Errorf("the second call dialed anew (%s, then %s): the connection was not kept", reqs[0].RemoteAddr, reqs[1].RemoteAddr)
	}
	if reqs[2].RemoteAddr == reqs[1].RemoteAddr {
		t.Errorf("the call after closeIdleConnections reused the connection %s", reqs[2].RemoteAddr)
	}
}
