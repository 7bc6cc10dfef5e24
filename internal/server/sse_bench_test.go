package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/server/sse"
	"github.com/agentd/agentd/internal/session"
)

// Benchmarks of the SSE routes, native against the gateway on the same
// server (the gateway path is what served them before, reached with
// viaHeader). Run, for example:
//
//	go test -run '^$' -bench 'SSE' -benchmem ./internal/server/
//	go test -run '^$' -bench 'IdleSSE' -benchtime 1x ./internal/server/

// BenchmarkSSEPrompt: one SSE prompt at a time, each on a fresh session
// (echo, 3 words: 9 events), read to its end over a kept-alive connection.
// first-event-ns is the time from sending the request to reading the first
// frame; allocs/op and B/op count the whole process (server and client).
// The grpc variant is the floor: the same prompt over the gRPC API (TCP).
// "interleaved" runs the three one after the other in each op (one server)
// and reports each one's median time to the first event.
func BenchmarkSSEPrompt(b *testing.B) {
	for _, via := range []string{"grpc", "gateway", "native"} {
		b.Run(via, func(b *testing.B) {
			p := newPrompter(b)
			for range 20 {
				p.prompt(via, p.newSession())
			}
			firsts := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				id := p.newSession()
				b.StartTimer()
				firsts = append(firsts, p.prompt(via, id))
			}
			b.StopTimer()
			b.ReportMetric(float64(median(firsts).Nanoseconds()), "first-event-p50-ns")
			var sum time.Duration
			for _, d := range firsts {
				sum += d
			}
			b.ReportMetric(float64(sum.Nanoseconds())/float64(len(firsts)), "first-event-ns")
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		p := newPrompter(b)
		vias := []string{"grpc", "gateway", "native"}
		firsts := map[string][]time.Duration{}
		for i := range b.N + 20 {
			for _, via := range vias {
				d := p.prompt(via, p.newSession())
				if i >= 20 {
					firsts[via] = append(firsts[via], d)
				}
			}
		}
		for _, via := range vias {
			b.ReportMetric(float64(median(firsts[via]).Nanoseconds()), via+"-first-event-p50-ns")
		}
	})
}

func median(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// prompter runs prompts on a server over the three paths.
type prompter struct {
	b      *testing.B
	ts     *sseTestServer
	client *http.Client
	made   []string // sessions made and not deleted yet
}

func newPrompter(b *testing.B) *prompter {
	p := &prompter{b: b, ts: startSSE(b, ""), client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}}
	b.Cleanup(p.client.CloseIdleConnections)
	return p
}

// newSession creates a session to prompt. Every 500 it deletes those made
// before (all prompted to their end by then), so that a long run stays
// under the tenant's session limit; callers make it outside what they time.
func (p *prompter) newSession() string {
	ctx := context.Background()
	if len(p.made) == 500 {
		for _, id := range p.made {
			if err := p.ts.srv.Sessions().Delete(ctx, LocalTenant, id); err != nil {
				p.b.Fatal(err)
			}
		}
		p.made = p.made[:0]
	}
	s, err := p.ts.srv.Sessions().Create(ctx, LocalTenant, session.CreateParams{Model: "sim/echo"})
	if err != nil {
		p.b.Fatal(err)
	}
	p.made = append(p.made, s.ID())
	return s.ID()
}

// prompt runs a prompt on session id to its end; it returns the time to its
// first event.
func (p *prompter) prompt(via, id string) time.Duration {
	b := p.b
	if via == "grpc" {
		return grpcPrompt(b, p.ts, id)
	}
	req, _ := http.NewRequest("POST", p.ts.base+"/v1/sessions/"+id+":prompt", strings.NewReader(`{"text":"one two three"}`))
	req.Header.Set("Accept", sse.ContentType)
	req.Header.Set("Content-Type", "application/json")
	if via == "gateway" {
		req.Header.Set(viaHeader, "gateway")
	}
	began := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		b.Fatal(err)
	}
	first := time.Since(began)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if !bytes.Contains(rest, []byte("event: prompt_end")) {
		b.Fatalf("no prompt_end: %q", rest)
	}
	return first
}

var grpcClients sync.Map // *sseTestServer -> agentdv1.AgentServiceClient

// grpcPrompt runs a prompt over gRPC to its end and returns the time to its
// first event.
func grpcPrompt(b *testing.B, ts *sseTestServer, id string) time.Duration {
	c, ok := grpcClients.Load(ts)
	if !ok {
		conn, err := grpc.NewClient(ts.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close(); grpcClients.Delete(ts) })
		c, _ = grpcClients.LoadOrStore(ts, agentdv1.NewAgentServiceClient(conn))
	}
	began := time.Now()
	stream, err := c.(agentdv1.AgentServiceClient).Prompt(context.Background(), &agentdv1.PromptRequest{SessionId: id, Text: "one two three"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		b.Fatal(err)
	}
	first := time.Since(began)
	for {
		ev, err := stream.Recv()
		if err != nil {
			b.Fatalf("prompt: %v", err)
		}
		if ev.GetType() == session.EventPromptEnd {
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				b.Fatalf("after prompt_end: %v", err)
			}
			return first
		}
	}
}

// BenchmarkIdleSSE: 1000 idle SSE readers (one per session, each session
// with one short prompt replayed at once), left unread; goroutines and heap
// (HeapAlloc + StackInuse after a GC) per reader, the server's and the
// test's client connections together. Run with -benchtime 1x.
func BenchmarkIdleSSE(b *testing.B) {
	const readers = 1000
	for _, via := range []string{"gateway", "native"} {
		b.Run(via, func(b *testing.B) {
			for range b.N {
				ts := startSSE(b, "")
				ids := make([]string, readers)
				for i := range ids {
					ids[i] = ts.session(b, "", "hi")
				}
				g0, h0, s0 := goroutinesAndHeap()
				conns := make([]net.Conn, 0, readers)
				buf := make([]byte, 4096)
				for _, id := range ids {
					conn, err := net.Dial("tcp", ts.addr)
					if err != nil {
						b.Fatal(err)
					}
					conns = append(conns, conn)
					hdr := ""
					if via == "gateway" {
						hdr = viaHeader + ": gateway\r\n"
					}
					fmt.Fprintf(conn, "GET /v1/sessions/%s/events?afterSeq=0 HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n%s\r\n", id, ts.addr, hdr)
					var got []byte
					conn.SetReadDeadline(time.Now().Add(10 * time.Second))
					for !bytes.Contains(got, []byte("event: prompt_end")) || !bytes.HasSuffix(got, []byte("\n\n\r\n")) {
						n, err := conn.Read(buf)
						if err != nil {
							b.Fatal(err)
						}
						got = append(got, buf[:n]...)
					}
				}
				// Each reader read its stream's replay to its end above (the
				// client's side of an open stream); the server's side: every
				// session has its one subscribed reader.
				for _, id := range ids {
					ts.waitReaders(b, LocalTenant, id, 1)
				}
				g1, h1, s1 := goroutinesAndHeap()
				b.ReportMetric(float64(g1-g0)/readers, "goroutines/reader")
				b.ReportMetric(float64(h1-h0)/readers/1024, "heap+stack-KiB/reader")
				b.ReportMetric(float64(s1-s0)/readers/1024, "stack-KiB/reader")
				for _, c := range conns {
					c.Close()
				}
			}
		})
	}
}

// goroutinesAndHeap returns the goroutines, HeapAlloc + StackInuse and
// StackInuse after a GC.
func goroutinesAndHeap() (int, int64, int64) {
	var ms runtime.MemStats
	for range 2 {
		runtime.GC()
	}
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), int64(ms.HeapAlloc + ms.StackInuse), int64(ms.StackInuse)
}

// BenchmarkSSEFanout: one session with 100 SSE readers; one op is a prompt of
// 40 words (46 events) delivered to every reader, unpaced (a burst) or paced
// (2 ms between words, as a model streams). Native with frames shared
// between the readers (F6), native with each reader encoding its own, and
// the gateway. cpu-ms/op is the process's CPU time (server and readers).
func BenchmarkSSEFanout(b *testing.B) {
	const readers = 100
	for _, pace := range []string{"burst", "paced"} {
		for _, c := range []struct {
			name string
			via  string
			opts []Option
		}{
			{"gateway", "gateway", []Option{withoutSharedFrames()}},
			{"native-unshared", "", []Option{withoutSharedFrames()}},
			{"native-shared", "", nil},
		} {
			b.Run(pace+"/"+c.name, func(b *testing.B) {
				yaml := ""
				if pace == "paced" {
					yaml = "providers: [{name: sim, kind: simulated, token_delay_ms: 2}]\n"
				}
				benchFanout(b, startSSE(b, yaml, c.opts...), c.via, readers)
			})
		}
	}
}

func benchFanout(b *testing.B, ts *sseTestServer, via string, readers int) {
	id := ts.session(b, "", "")
	sess, err := ts.srv.Sessions().Get(context.Background(), LocalTenant, id)
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu   sync.Mutex
		cond = sync.NewCond(&mu)
		ends int
		wg   sync.WaitGroup
	)
	conns := make([]net.Conn, readers)
	for i := range conns {
		conn, err := net.Dial("tcp", ts.addr)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = conn
		hdr := ""
		if via == "gateway" {
			hdr = viaHeader + ": gateway\r\n"
		}
		fmt.Fprintf(conn, "GET /v1/sessions/%s/events HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n%s\r\n", id, ts.addr, hdr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The body, de-chunked: a chunk's header can fall inside a
			// frame (a burst of frames fills net/http's buffer between two
			// flushes), so the raw bytes may not hold the marker whole.
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			const marker = "event: prompt_end"
			buf := make([]byte, 32<<10)
			var tail []byte
			for {
				n, err := resp.Body.Read(buf)
				if n == 0 && err != nil {
					return
				}
				tail = append(tail, buf[:n]...)
				if k := bytes.Count(tail, []byte(marker)); k > 0 {
					mu.Lock()
					ends += k
					cond.Broadcast()
					mu.Unlock()
					tail = tail[bytes.LastIndex(tail, []byte(marker))+1:]
				}
				if len(tail) > len(marker) {
					tail = tail[len(tail)-len(marker):]
				}
			}
		}()
	}
	// No byte reaches a reader before the first event (its headers go
	// with it): the stream is open when the session counts its subscriber.
	ts.waitReaders(b, LocalTenant, id, readers)
	text := strings.TrimSpace(strings.Repeat("word ", 40))
	prompt := func(n int) {
		_, sub, err := sess.Prompt(context.Background(), text)
		if err != nil {
			b.Fatal(err)
		}
		sub.Close()
		mu.Lock()
		for ends < n*readers {
			cond.Wait()
		}
		mu.Unlock()
	}
	prompt(1)
	cpu0 := cpuTime()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		prompt(i + 2)
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
