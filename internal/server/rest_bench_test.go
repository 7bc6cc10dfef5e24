package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/server/sse"
)

// BenchmarkRESTSession: the per-prompt path over REST, one op after the
// other on a kept-alive connection: POST /v1/sessions, an SSE prompt
// (echo, 3 words: 9 events) read to its end, DELETE /v1/sessions/{id}.
// cpu-us/op is the process's CPU time (server and client) per op;
// allocs/op and B/op count the whole process too. Variants:
//
//   - gateway: every request through the gateway and its in-process gRPC
//     call;
//   - sse-native: the JSON requests through the gateway, the SSE prompt
//     native (the state before the native REST routes);
//   - native: every request native;
//   - interleaved: the three one after the other in each op, each one's
//     CPU time measured around its own requests (less noise from a busy
//     machine: the ratios come from the same moments).
//
// The crud variants run POST, GET and DELETE without a prompt. Run, for
// example:
//
//	go test -run '^$' -bench 'RESTSession' -benchtime 2000x -count 3 ./internal/server/
func BenchmarkRESTSession(b *testing.B) {
	for _, kind := range []string{"prompt", "crud"} {
		for _, via := range restVias {
			b.Run(kind+"/"+via.name, func(b *testing.B) {
				p := newPrompter(b)
				op := func() { p.sessionOp(via, kind == "prompt") }
				for range 50 {
					op()
				}
				b.ReportAllocs()
				cpu0 := cpuTime()
				b.ResetTimer()
				for range b.N {
					op()
				}
				b.StopTimer()
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			})
		}
		b.Run(kind+"/interleaved", func(b *testing.B) {
			p := newPrompter(b)
			cpu := make([]time.Duration, len(restVias))
			for i := range b.N + 50 {
				for j, via := range restVias {
					c0 := cpuTime()
					p.sessionOp(via, kind == "prompt")
					if i >= 50 {
						cpu[j] += cpuTime() - c0
					}
				}
			}
			for j, via := range restVias {
				b.ReportMetric(float64(cpu[j].Microseconds())/float64(b.N), via.name+"-cpu-us/op")
			}
			last := len(restVias) - 1
			for j := range last {
				b.ReportMetric(float64(cpu[j])/float64(cpu[last]), restVias[j].name+"/native-cpu")
			}
		})
	}
}

// restVia says which requests of an op go through the gateway.
type restVia struct {
	name      string
	json, sse bool // through the gateway
}

var restVias = []restVia{
	{name: "gateway", json: true, sse: true},
	{name: "sse-native", json: true},
	{name: "native"}, // last: the reference of the ratios
}

// sessionOp creates a session, runs one SSE prompt on it (with prompt) and
// deletes it, over REST.
func (p *prompter) sessionOp(via restVia, prompt bool) {
	b := p.b
	body := p.restCall(via.json, "POST", "/v1/sessions", `{"model":"sim/echo"}`, "application/json")
	var s struct{ ID string }
	if err := json.Unmarshal(body, &s); err != nil || s.ID == "" {
		b.Fatalf("create: %q (%v)", body, err)
	}
	if prompt {
		rest := p.restCall(via.sse, "POST", "/v1/sessions/"+s.ID+":prompt", `{"text":"one two three"}`, sse.ContentType)
		if !bytes.Contains(rest, []byte("event: prompt_end")) {
			b.Fatalf("no prompt_end: %q", rest)
		}
	} else if got := p.restCall(via.json, "GET", "/v1/sessions/"+s.ID, "", "application/json"); !bytes.Contains(got, []byte(s.ID)) {
		b.Fatalf("get: %q", got)
	}
	if got := p.restCall(via.json, "DELETE", "/v1/sessions/"+s.ID, "", "application/json"); string(got) != "{}" {
		b.Fatalf("delete: %q", got)
	}
}

// restCall sends one request and returns its body, failing unless it is a
// 200.
func (p *prompter) restCall(gateway bool, method, path, body, accept string) []byte {
	b := p.b
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, p.ts.base+path, rd)
	req.Header.Set("Accept", accept)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if gateway {
		req.Header.Set(viaHeader, "gateway")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(bufio.NewReader(resp.Body))
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s %s: %d %q (%v)", method, path, resp.StatusCode, out, err)
	}
	return out
}
