package bench

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"time"
)

// Floor is the bare reverse proxy: httputil.ReverseProxy in front of the
// mock, on a loopback port of the bench's process.
type Floor struct {
	URL string
	srv *http.Server
}

// StartFloor starts a reverse proxy to target; the proxy's errors (an
// upstream that failed mid-stream) go to errLog.
func StartFloor(target string, errLog io.Writer) (*Floor, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(errLog, "floor proxy: ", 0)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	// Full duplex: otherwise net/http's HTTP/1 server consumes and closes
	// what it takes for the unread rest of a request body when the
	// handler first writes, while the proxy's transport may still be
	// forwarding that body; the transport then drops the upstream
	// connection mid-answer ("use of closed network connection") and the
	// client's stream ends with an unexpected EOF. 4 of 3000 requests one
	// at a time failed so before, none since.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
	f := &Floor{URL: "http://" + lis.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = f.srv.Serve(lis) }()
	return f, nil
}

// Close stops the proxy.
func (f *Floor) Close() { _ = f.srv.Close() }

// FloorProcMsg starts the line a floor-proxy process prints when ready.
const FloorProcMsg = "floor proxy listening on "

// RunFloorProxy is `agentd bench floor-proxy --target URL`: the bare
// reverse proxy as a process of its own, so that its CPU time can be read
// from /proc like agentd's. It serves until SIGTERM; with cpuProfile set,
// its whole run is CPU-profiled into that file.
func RunFloorProxy(ctx context.Context, target, cpuProfile string, stdout io.Writer) error {
	return profiled(cpuProfile, func() error {
		f, err := StartFloor(target, stdout)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(stdout, "%s%s\n", FloorProcMsg, f.URL)
		<-ctx.Done()
		return nil
	})
}

// profiled runs run, CPU-profiled into the file cpuProfile when that is
// set.
func profiled(cpuProfile string, run func() error) error {
	if cpuProfile != "" {
		pf, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = pf.Close()
		}()
	}
	return run()
}

// StartFloorProc runs `bin bench floor-proxy` in front of target, with
// its CPU profile written to cpuProfile when that is set.
func StartFloorProc(bin, target, cpuProfile string) (*MockProc, error) {
	return startFloorProc(bin, "floor-proxy", FloorProcMsg, target, cpuProfile)
}

// startFloorProc runs `bin bench <sub> --target target`, with
// --cpuprofile when cpuProfile is set, until it prints ready and its
// address (the MockProc's URL).
func startFloorProc(bin, sub, ready, target, cpuProfile string) (*MockProc, error) {
	args := []string{"bench", sub, "--target", target}
	if cpuProfile != "" {
		args = append(args, "--cpuprofile", cpuProfile)
	}
	cmd := exec.Command(bin, args...)
	m := &MockProc{}
	p, err := start(sub, cmd, 30*time.Second, func(line string) bool {
		if u, ok := strings.CutPrefix(line, ready); ok {
			m.URL = strings.TrimSpace(u)
			return true
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	m.Proc = p
	return m, nil
}
