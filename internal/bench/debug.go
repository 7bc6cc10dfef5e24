package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"time"
)

const debugMsg = "agentd bench debug listener"

// ServeDebug starts the bench's debug listener on addr, which must be a
// loopback address, and logs its bound address as a JSON line to w:
//
//	GET /debug/bench/mem[?gc=1]          Go memory statistics (after a GC with gc=1)
//	GET /debug/pprof/profile?seconds=N   CPU profile (N ≤ 60)
//	GET /debug/pprof/trace?seconds=N     execution trace (N ≤ 60)
//	GET /debug/pprof/{heap,goroutine,allocs,block,mutex}
//
// `agentd serve` starts it when AGENTD_BENCH_DEBUG_ADDR is set (the bench
// sets it on the agentd it starts); it is never on otherwise.
func ServeDebug(addr string, w io.Writer) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s: %q is not a loopback address", DebugEnv, addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/bench/mem", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
			runtime.GC() // the second cycle frees what the first one's finalizers released
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(MemStats{
			HeapAlloc: ms.HeapAlloc, HeapInuse: ms.HeapInuse, HeapSys: ms.HeapSys, StackInuse: ms.StackInuse,
			Sys: ms.Sys, HeapIdle: ms.HeapIdle, HeapReleased: ms.HeapReleased, StackSys: ms.StackSys,
			MSpanSys: ms.MSpanSys, GCSys: ms.GCSys, OtherSys: ms.OtherSys + ms.MCacheSys + ms.BuckHashSys,
			NumGC: ms.NumGC, Goroutines: runtime.NumGoroutine(), Live: ms.HeapAlloc + ms.StackInuse,
		})
	})
	mux.HandleFunc("GET /debug/pprof/profile", recording(pprof.StartCPUProfile, pprof.StopCPUProfile))
	mux.HandleFunc("GET /debug/pprof/trace", recording(trace.Start, trace.Stop))
	mux.HandleFunc("GET /debug/pprof/{name}", func(w http.ResponseWriter, r *http.Request) {
		p := pprof.Lookup(r.PathValue("name"))
		if p == nil {
			http.NotFound(w, r)
			return
		}
		if r.PathValue("name") == "heap" && r.URL.Query().Get("gc") == "1" {
			runtime.GC()
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_ = p.WriteTo(w, 0)
	})
	b, _ := json.Marshal(map[string]string{"msg": debugMsg, "addr": lis.Addr().String()})
	fmt.Fprintf(w, "%s\n", b)
	go func() { _ = (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(lis) }()
	return nil
}

// recording serves a recording (a CPU profile, an execution trace) of
// ?seconds=N (1–60, or until the client goes) written to the response.
func recording(start func(io.Writer) error, stop func()) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sec, _ := strconv.Atoi(r.URL.Query().Get("seconds"))
		sec = min(max(sec, 1), 60)
		w.Header().Set("Content-Type", "application/octet-stream")
		if err := start(w); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		select {
		case <-time.After(time.Duration(sec) * time.Second):
		case <-r.Context().Done():
		}
		stop()
	}
}
