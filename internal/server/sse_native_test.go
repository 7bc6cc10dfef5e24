package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gwruntime "github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/server/convert"
	"github.com/agentd/agentd/internal/server/sse"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/telemetry"
	"github.com/agentd/agentd/internal/testkit"
)

// The native SSE routes answer as the gateway did: each case is sent twice to
// one server, once through the gateway (viaHeader) and once natively, and the
// raw responses (status line, headers, chunked body) must be equal but for
// the Date header.

const viaHeader = "X-Agentd-Test-Via"

type sseTestServer struct {
	app    TestApp
	srv    *Server
	addr   string
	base   string
	native atomic.Int64 // requests the native routes took
}

func startSSE(t testing.TB, yaml string, opts ...Option) *sseTestServer {
	t.Helper()
	return startSSETraced(t, yaml, nil, opts...)
}

// startSSETraced is startSSE tracing with tr whatever the configuration
// says (nil: as configured).
func startSSETraced(t testing.TB, yaml string, tr *telemetry.Tracing, opts ...Option) *sseTestServer {
	t.Helper()
	ts := &sseTestServer{}
	opts = append([]Option{withViaGateway(func(r *http.Request) bool {
		if r.Header.Get(viaHeader) == "gateway" {
			return true
		}
		ts.native.Add(1)
		return false
	})}, opts...)
	a := startTestApp(t, yaml, nil, tr, opts...)
	srv := a.Server()
	ts.app, ts.srv, ts.addr, ts.base = a, srv, srv.HTTPAddr(), "http://"+srv.HTTPAddr()
	return ts
}

// rawConn is one HTTP/1.1 exchange on its own connection, read raw.
type rawConn struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
}

// open sends a raw request: method, target, headers ("Name: value"), body.
func (ts *sseTestServer) open(t testing.TB, via, method, target string, headers []string, body string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, ts.addr)
	if via != "" {
		fmt.Fprintf(&b, "%s: %s\r\n", viaHeader, via)
	}
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if body != "" || method == "POST" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

var (
	dateLine = regexp.MustCompile(`(?m)^Date: [^\r]*\r\n`)
	// (protojson may put a space after a comma: it varies by build.)
	deadlineFrame = regexp.MustCompile(`(\r\n)[0-9a-f]+\r\nevent: error\ndata: \{"code":4, ?"message": ?"(?:context deadline exceeded|stream terminated by RST_STREAM with error code: CANCEL)"(, ?"details": ?\[\]\}\n\n\r\n)`)
)

// all reads the response to its end (the server closes: Connection: close).
func (c *rawConn) all() string {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c.br)
	if err != nil {
		c.t.Fatalf("read: %v (after %q)", err, b)
	}
	return dateLine.ReplaceAllString(string(b), "Date: -\r\n")
}

// until reads up to and including the first occurrence of s.
func (c *rawConn) until(s string) string {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b []byte
	for !bytes.Contains(b, []byte(s)) {
		ch, err := c.br.ReadByte()
		if err != nil {
			c.t.Fatalf("read until %q: %v (after %q)", s, err, b)
		}
		b = append(b, ch)
	}
	return dateLine.ReplaceAllString(string(b), "Date: -\r\n")
}

// same sends a request through both paths and returns the native answer,
// failing unless both are equal. A nil end reads each answer to its end; else
// end is called with both requests open (to end the streams).
func (ts *sseTestServer) same(t *testing.T, name, method, target string, headers []string, body string, end func()) string {
	return ts.sameAs(t, name, method, target, headers, body, end, true)
}

// sameAs is same; native says whether the request reaches the native routes
// (not when web.go refuses it before, as a bad ticket).
func (ts *sseTestServer) sameAs(t *testing.T, name, method, target string, headers []string, body string, end func(), native bool) string {
	t.Helper()
	t.Logf("case %s", name)
	before := ts.native.Load()
	gw := ts.open(t, "gateway", method, target, headers, body)
	var gwOut string
	if end == nil {
		gwOut = gw.all()
	}
	nat := ts.open(t, "", method, target, headers, body)
	var natOut string
	if end == nil {
		natOut = nat.all()
	} else {
		end() // it waits for both streams to be open
		gwOut, natOut = gw.all(), nat.all()
	}
	if took := ts.native.Load() > before; took != native {
		t.Fatalf("%s: the native route taken: %v", name, took)
	}
	if strings.Contains(strings.Join(headers, "\n"), "Grpc-Timeout: 1") {
		// The gateway's message for its deadline was either its own or the
		// server's reset of the stream, whichever came first; the native
		// stream's is always "context deadline exceeded".
		if !deadlineFrame.MatchString(natOut) {
			t.Fatalf("%s: no deadline frame in %q", name, natOut)
		}
		gwOut, natOut = deadlineFrame.ReplaceAllString(gwOut, "$1-$2"), deadlineFrame.ReplaceAllString(natOut, "$1-$2")
	}
	// The bodies, not where each side cut them into chunks: the native
	// stream flushes a burst of ready frames once.
	gwOut, natOut = joinChunks(gwOut), joinChunks(natOut)
	if gwOut != natOut {
		t.Fatalf("%s: the answers differ\ngateway:\n%s\nnative:\n%s", name, gwOut, natOut)
	}
	return natOut
}

// joinChunks joins the chunks of a raw chunked HTTP/1.1 response (status
// and headers kept, a cut-off chunk as it came); anything else is returned
// as it is.
func joinChunks(raw string) string {
	head, body, ok := strings.Cut(raw, "\r\n\r\n")
	if !ok || !strings.Contains(head, "Transfer-Encoding: chunked") {
		return raw
	}
	var out strings.Builder
	for body != "" {
		line, rest, ok := strings.Cut(body, "\r\n")
		n, err := strconv.ParseInt(line, 16, 64)
		if !ok || err != nil || int64(len(rest)) < n {
			out.WriteString(body) // cut off: keep what came
			break
		}
		if n == 0 {
			out.WriteString("\n[end]\n")
			break
		}
		out.WriteString(rest[:n])
		body = strings.TrimPrefix(rest[n:], "\r\n")
	}
	return head + "\r\n\r\n" + out.String()
}

func (ts *sseTestServer) do(t testing.TB, method, path, body, token string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, ts.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
	}
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}

// session creates a session; with text, runs one prompt to its end.
func (ts *sseTestServer) session(t testing.TB, token, text string) string {
	t.Helper()
	id := ts.do(t, "POST", "/v1/sessions", `{"model":"sim/echo"}`, token)["id"].(string)
	if text != "" {
		tenant := map[string]string{"": LocalTenant, sseTokenA: "team-a", sseTokenB: "team-b"}[token]
		sess, err := ts.srv.Sessions().Get(context.Background(), tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		_, sub, err := sess.Prompt(context.Background(), text)
		if err != nil {
			t.Fatal(err)
		}
		// Not read: with a small event_buffer the prompt outruns a reader.
		sub.Close()
		testkit.Eventually(t, "the prompt ended", func() bool {
			return ts.do(t, "GET", "/v1/sessions/"+id, "", token)["status"] == "idle"
		})
	}
	return id
}

const (
	sseTokenA = "token-team-a-0123456789"
	sseTokenB = "token-team-b-0123456789"
	sseAuth   = "auth: {tokens: [{token: " + sseTokenA + ", tenant: team-a}, {token: " + sseTokenB + ", tenant: team-b}]}\n"
)

var (
	sseAccept = "Accept: text/event-stream"
	bearerA   = "Authorization: Bearer " + sseTokenA
)

func TestNativeSSEMatchesGateway(t *testing.T) {
	ts := startSSE(t, sseAuth+"http: {cors: {allowed_origins: ['http://app.example']}}\nsessions: {event_buffer: 16}\n")
	done := ts.session(t, sseTokenA, "one two three")
	long := ts.session(t, sseTokenA, strings.Repeat("w ", 30)) // more events than the buffer holds
	idle := ts.session(t, sseTokenA, "")
	other := ts.session(t, sseTokenB, "hi")
	ticket := ts.do(t, "POST", "/v1/sessions/"+done+":streamTicket", `{}`, sseTokenA)["ticket"].(string)
	ev := func(id, query string) string { return "/v1/sessions/" + id + "/events" + query }
	pr := func(id string) string { return "/v1/sessions/" + id + ":prompt" }

	// Errors before the stream: the gRPC call's errors (an "event: error"
	// body, chunked) and the gateway's own (a JSON body).
	for _, c := range []struct {
		name, method, target string
		headers              []string
		body                 string
		status               string
	}{
		{"unknown session", "GET", ev(missingID, ""), []string{sseAccept, bearerA}, "", "404"},
		{"another tenant's session", "GET", ev(other, ""), []string{sseAccept, bearerA}, "", "404"},
		{"malformed id", "GET", ev("xyz", ""), []string{sseAccept, bearerA}, "", "400"},
		{"no token (refused before the routes)", "GET", ev(done, ""), []string{sseAccept}, "", "401"},
		{"bad token (refused before the routes)", "GET", ev(done, ""), []string{sseAccept, "Authorization: Bearer nope"}, "", "401"},
		{"not a bearer (refused before the routes)", "GET", ev(done, ""), []string{sseAccept, "Authorization: Basic eA=="}, "", "401"},
		{"after the newest", "GET", ev(done, "?afterSeq=999"), []string{sseAccept, bearerA}, "", "400"},
		{"after_seq not a number", "GET", ev(done, "?afterSeq=abc"), []string{sseAccept, bearerA}, "", "400"},
		{"repeated after_seq", "GET", ev(done, "?after_seq=1&afterSeq=2"), []string{sseAccept, bearerA}, "", "400"},
		{"bad query escape", "GET", ev(done, "?afterSeq=%zz"), []string{sseAccept, bearerA}, "", "400"},
		{"dropped events", "GET", ev(long, "?afterSeq=0"), []string{sseAccept, bearerA}, "", "400"},
		{"dropped events, Last-Event-ID", "GET", ev(long, ""), []string{sseAccept, bearerA, "Last-Event-ID: 1"}, "", "400"},
		{"Last-Event-ID not a seq (refused before the routes)", "GET", ev(done, ""), []string{sseAccept, bearerA, "Last-Event-ID: x"}, "", "400"},
		{"ticket, the query names another session", "GET", ev(done, "?ticket="+url.QueryEscape(ticket)+"&session_id="+idle+"&sessionId="+idle+"&afterSeq=999"), []string{sseAccept}, "", "400"},
		{"ticket of another session", "GET", ev(idle, "?ticket="+url.QueryEscape(ticket)), []string{sseAccept}, "", "401"},
		{"bad ticket", "GET", ev(done, "?ticket=v1.x.y"), []string{sseAccept}, "", "401"},
		{"session id not UTF-8", "GET", ev("%FF", ""), []string{sseAccept, bearerA}, "", "500"},
		{"prompt: session id not UTF-8", "POST", pr("%FF"), []string{sseAccept, bearerA}, `{"text":"hi"}`, "500"},
		{"bad Grpc-Timeout", "GET", ev(done, ""), []string{sseAccept, bearerA, "Grpc-Timeout: soon"}, "", "400"},
		{"after_seq not a number, TE trailers", "GET", ev(done, "?afterSeq=x"), []string{sseAccept, bearerA, "TE: trailers"}, "", "400"},
		{"deadline before an event", "GET", ev(idle, ""), []string{sseAccept, bearerA, "Grpc-Timeout: 100m"}, "", "504"},
		{"deadline after the replay", "GET", ev(done, ""), []string{sseAccept, bearerA, "Grpc-Timeout: 150m"}, "", "200"},
		{"Accept: two values", "GET", ev(missingID, ""), []string{"Accept: application/json", sseAccept, bearerA}, "", "404"},
		{"Accept: a list (the gateway: NDJSON)", "GET", ev(missingID, ""), []string{"Accept: text/event-stream, */*", bearerA}, "", "404"},
		{"escaped path (the gateway)", "GET", ev("ses%5Faaaaaaaaaaaaaaaaaaaaaaaaaa", ""), []string{sseAccept, bearerA}, "", "404"},
		{"method override (the gateway)", "POST", pr(missingID), []string{sseAccept, bearerA, "X-HTTP-Method-Override: POST"}, `{"text":"hi"}`, "404"},
		{"CORS origin", "GET", ev(missingID, ""), []string{sseAccept, bearerA, "Origin: http://app.example"}, "", "404"},

		{"prompt: unknown session", "POST", pr(missingID), []string{sseAccept, bearerA, "Content-Type: application/json"}, `{"text":"hi"}`, "404"},
		{"prompt: unknown field", "POST", pr(idle), []string{sseAccept, bearerA, "Content-Type: application/json"}, `{"text":"hi","bogus":1}`, "400"},
		{"prompt: malformed body", "POST", pr(idle), []string{sseAccept, bearerA, "Content-Type: application/json"}, `{"text":`, "400"},
		{"prompt: wrong type", "POST", pr(idle), []string{sseAccept, bearerA}, `{"text":5}`, "400"},
		{"prompt: empty text", "POST", pr(idle), []string{sseAccept, bearerA, "Content-Type: application/json"}, `{}`, "400"},
		{"prompt: empty body", "POST", pr(idle), []string{sseAccept, bearerA}, ``, "400"},
		{"prompt: bad fault script", "POST", pr(idle), []string{sseAccept, bearerA}, `{"text":"[[faults: nope]]"}`, "400"},
		{"prompt: no token (refused before the routes)", "POST", pr(idle), []string{sseAccept}, `{"text":"hi"}`, "401"},
		{"prompt: sessionId in the body", "POST", pr(missingID), []string{sseAccept, bearerA}, `{"text":"hi","sessionId":"` + idle + `"}`, "404"},
		{"prompt: CORS origin", "POST", pr(missingID), []string{sseAccept, bearerA, "Origin: http://app.example"}, `{"text":"hi"}`, "404"},
	} {
		// A bad ticket, a missing token and an oversized body are refused
		// before the stream routes (web.go); the others named so stay on
		// the gateway.
		gateway := strings.Contains(c.target, "ticket=v1.x") || c.name == "ticket of another session" || strings.Contains(c.name, "(the gateway") ||
			strings.Contains(c.name, "before the routes")
		got := ts.sameAs(t, c.name, c.method, c.target, c.headers, c.body, nil, !gateway)
		if !strings.HasPrefix(got, "HTTP/1.1 "+c.status+" ") {
			t.Errorf("%s: %q, want %s", c.name, got[:min(len(got), 300)], c.status)
		}
	}

	// A busy session: a prompt hangs.
	busy := ts.session(t, sseTokenA, "")
	hang := ts.open(t, "", "POST", pr(busy), []string{sseAccept, bearerA}, `{"text":"[[faults: hang]]"}`)
	hang.until("event: message_start")
	got := ts.same(t, "prompt: busy", "POST", pr(busy), []string{sseAccept, bearerA}, `{"text":"hi"}`, nil)
	if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !strings.Contains(got, "FAILED_PRECONDITION") && !strings.Contains(got, `"code":9`) {
		t.Errorf("busy: %q", got)
	}

	// Streams that end: the session is deleted while both read it.
	for _, c := range []struct {
		name, query string
		headers     []string
	}{
		{"replay", "", nil},
		{"afterSeq", "?afterSeq=2", nil},
		{"after_seq", "?after_seq=3", nil},
		{"Last-Event-ID", "", []string{"Last-Event-ID: 4"}},
		{"Last-Event-ID wins", "?afterSeq=2", []string{"Last-Event-ID: 5"}},
		{"afterSeq wins over an older Last-Event-ID", "?afterSeq=5", []string{"Last-Event-ID: 2"}},
		{"ticket", "?ticket=", nil},
		{"CORS", "", []string{"Origin: http://app.example"}},
		{"CORS, disallowed origin", "", []string{"Origin: http://evil.example"}},
		{"no event before the end", "?afterSeq=LAST", nil},
		{"frames over net/http's 2 KiB chunk buffer", "?afterSeq=LONG", nil},
	} {
		text := "one two three"
		if c.query == "?afterSeq=LONG" {
			text = strings.Repeat("word ", 600) // message_end carries the whole text
		}
		id := ts.session(t, sseTokenA, text)
		headers := append([]string{sseAccept}, c.headers...)
		query := c.query
		if query == "?ticket=" {
			tk := ts.do(t, "POST", "/v1/sessions/"+id+":streamTicket", `{}`, sseTokenA)["ticket"].(string)
			query += url.QueryEscape(tk)
		} else {
			headers = append(headers, bearerA)
		}
		if query == "?afterSeq=LAST" || query == "?afterSeq=LONG" {
			var last int
			fmt.Sscan(ts.do(t, "GET", "/v1/sessions/"+id, "", sseTokenA)["lastSeq"].(string), &last)
			if query == "?afterSeq=LONG" {
				last -= 4 // the last delta, message_end, agent_end, prompt_end (within the buffer of 16)
			}
			query = fmt.Sprintf("?afterSeq=%d", last)
		}
		got := ts.same(t, c.name, "GET", ev(id, query), headers, "", func() {
			ts.waitReaders(t, "team-a", id, 2)
			ts.do(t, "DELETE", "/v1/sessions/"+id, "", sseTokenA)
		})
		// A stream that sent events goes on 200; one that had sent none
		// gets the gateway's answer to an error before the first event.
		if want := "HTTP/1.1 200 "; c.query == "?afterSeq=LAST" && !strings.HasPrefix(got, "HTTP/1.1 404 ") ||
			c.query != "?afterSeq=LAST" && !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q", c.name, got)
		}
		// Not a bare end of stream: a final error frame says the session
		// was deleted.
		_, last, _ := strings.Cut("\n"+got, "\nevent: error\ndata: ")
		if !regexp.MustCompile(`^\{"code":\s*5,\s*"message":\s*"session ` + id + ` was deleted; its event stream has ended",\s*"details":\s*\[\]\}\n\n\n\[end\]\n$`).MatchString(last) {
			t.Errorf("%s: the stream of a deleted session ends without an error frame naming why: %q", c.name, got)
		}
	}

	// Prompt streams: the same headers, and frames equal to the gateway's
	// frames of the same events.
	pid := ts.session(t, sseTokenA, "")
	for _, via := range []string{"gateway", ""} {
		c := ts.open(t, via, "POST", pr(pid), []string{sseAccept, bearerA, "Origin: http://app.example"}, `{"text":"a b c"}`)
		resp := c.all()
		head, body, _ := strings.Cut(resp, "\r\n\r\n")
		if !strings.Contains(head, "Content-Type: text/event-stream") || !strings.Contains(head, "Access-Control-Allow-Origin: http://app.example") {
			t.Fatalf("prompt via %q: %s", via, head)
		}
		frames := dechunk(t, body)
		first := regexp.MustCompile(`^id: (\d+)\n`).FindStringSubmatch(frames)
		if first == nil || !strings.HasSuffix(frames, "\n\n") || !strings.Contains(frames, "event: prompt_end") {
			t.Fatalf("prompt via %q: %q", via, frames)
		}
		other := "gateway"
		if via == "gateway" {
			other = ""
		}
		var after int
		fmt.Sscan(first[1], &after)
		replay := ts.open(t, other, "GET", ev(pid, fmt.Sprintf("?afterSeq=%d", after-1)), []string{sseAccept, bearerA}, "")
		if got := replay.until("event: prompt_end") + replay.until("\n\n\r\n"); !strings.Contains(dechunkPrefix(got), frames) {
			t.Fatalf("prompt via %q: frames\n%q\nnot in the other path's replay\n%q", via, frames, got)
		}
		replay.conn.Close()
		h1 := headOf(resp)
		c2 := ts.open(t, other, "POST", pr(pid), []string{sseAccept, bearerA, "Origin: http://app.example"}, `{"text":"d"}`)
		if h2 := headOf(c2.all()); h1 != h2 {
			t.Fatalf("prompt headers differ:\n%s\n%s", h1, h2)
		}
	}
}

const missingID = "ses_aaaaaaaaaaaaaaaaaaaaaaaaaa"

func headOf(resp string) string {
	head, _, _ := strings.Cut(resp, "\r\n\r\n")
	return head
}

// dechunk decodes a whole chunked body.
func dechunk(t testing.TB, body string) string {
	t.Helper()
	var out strings.Builder
	for {
		sizeLine, rest, ok := strings.Cut(body, "\r\n")
		if !ok {
			t.Fatalf("chunked body %q", body)
		}
		var n int
		if _, err := fmt.Sscanf(sizeLine, "%x", &n); err != nil {
			t.Fatalf("chunk size %q", sizeLine)
		}
		if n == 0 {
			return out.String()
		}
		out.WriteString(rest[:n])
		body = rest[n+2:]
	}
}

// dechunkPrefix decodes the complete chunks of a response read so far.
func dechunkPrefix(resp string) string {
	_, body, _ := strings.Cut(resp, "\r\n\r\n")
	var out strings.Builder
	for {
		sizeLine, rest, ok := strings.Cut(body, "\r\n")
		var n int
		if !ok || func() bool { _, err := fmt.Sscanf(sizeLine, "%x", &n); return err != nil }() || n == 0 || len(rest) < n {
			return out.String()
		}
		out.WriteString(rest[:n])
		body = rest[min(n+2, len(rest)):]
	}
}

// Heartbeats: the first ping sends the headers; pings go on between events.
func TestNativeSSEHeartbeatMatchesGateway(t *testing.T) {
	ts := startSSE(t, "http: {sse_heartbeat_ms: 50}\n")
	id := ts.session(t, "", "")
	gw := ts.open(t, "gateway", "GET", "/v1/sessions/"+id+"/events", []string{sseAccept}, "")
	nat := ts.open(t, "", "GET", "/v1/sessions/"+id+"/events", []string{sseAccept}, "")
	twoPings := "\r\n: ping\n\n\r\n8\r\n: ping\n\n\r\n"
	g, n := gw.until(twoPings), nat.until(twoPings)
	if g != n || ts.native.Load() == 0 {
		t.Fatalf("idle streams differ:\n%s\n%s", g, n)
	}
	if !strings.HasPrefix(n, "HTTP/1.1 200 OK\r\n") || !strings.Contains(n, "Content-Type: text/event-stream\r\n") ||
		!strings.Contains(n, "Cache-Control: no-cache\r\n") || !strings.Contains(n, "X-Accel-Buffering: no\r\n") {
		t.Fatalf("idle stream: %q", n)
	}
	// Events between pings: whole frames, in order.
	ts.do(t, "POST", "/v1/sessions/"+id+":prompt", `{"text":"a b c"}`, "")
	// prompt_end may share a chunk with the frames before it (one write
	// per burst): read to that chunk's end.
	upTo := nat.until("event: prompt_end")
	rest := dechunkPrefix("x\r\n\r\n" + upTo + nat.until("\n\n\r\n"))
	seq := 0
	for _, f := range strings.Split(strings.TrimSuffix(rest, "\n\n"), "\n\n") {
		if f == ": ping" {
			continue
		}
		seq++
		if !strings.HasPrefix(f, fmt.Sprintf("id: %d\nevent: ", seq)) {
			t.Fatalf("frame %d: %q", seq, f)
		}
	}
	if seq < 5 {
		t.Fatalf("%d frames: %q", seq, rest)
	}
}

// A drain ends the streams as before: the prompt with its prompt_end, the
// events stream after its last event.
func TestNativeSSEDrain(t *testing.T) {
	ts := startSSE(t, "")
	var streams []*rawConn
	for _, via := range []string{"gateway", ""} {
		id := ts.session(t, "", "")
		p := ts.open(t, via, "POST", "/v1/sessions/"+id+":prompt", []string{sseAccept}, `{"text":"x [[faults: hang]]"}`)
		p.until("event: message_start")
		e := ts.open(t, via, "GET", "/v1/sessions/"+id+"/events", []string{sseAccept}, "")
		e.until("event: message_start")
		streams = append(streams, p, e)
	}
	if err := ts.app.Stop(testkit.ContextFor(t, testkit.StopTimeout)); err != nil {
		t.Fatal(err)
	}
	ends := map[string]string{}
	for i, c := range streams {
		rest := c.all()
		if !strings.HasSuffix(rest, "\r\n0\r\n\r\n") {
			t.Fatalf("stream %d: %q", i, rest)
		}
		// Beyond the ids and times, the ends are the same.
		rest = regexp.MustCompile(`"(time|promptId|sessionId)":"[^"]*"|prm_[A-Z0-9]+|id: \d+`).ReplaceAllString(rest, "-")
		rest = regexp.MustCompile(`"seq":"\d+"`).ReplaceAllString(rest, "-")
		rest = regexp.MustCompile(`(?m)^[0-9a-f]+\r$`).ReplaceAllString(rest, "-")
		// Chunk boundaries are where each side flushed: the native stream
		// flushes a burst of ready frames once.
		rest = strings.ReplaceAll(rest, "\r\n-\n", "")
		if !strings.Contains(rest, "event: prompt_end") || !strings.Contains(rest, `server shutting down`) {
			t.Fatalf("stream %d ended with %q", i, rest)
		}
		key := []string{"prompt", "events"}[i%2]
		if prev, ok := ends[key]; ok && prev != rest {
			t.Fatalf("%s streams end differently:\n%q\n%q", key, prev, rest)
		}
		ends[key] = rest
	}
}

// legacyMarshal is the SSE marshaler's Marshal before the native routes
// (b4c04f1), the reference for the bytes of a frame.
func legacyMarshal(m *sse.Marshaler, v any) ([]byte, error) {
	var b bytes.Buffer
	switch chunk := v.(type) {
	case map[string]any:
		if ev, ok := chunk["result"].(*agentdv1.Event); ok {
			data, err := m.JSONPb.Marshal(ev)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "id: %d\nevent: %s\n", ev.GetSeq(), ev.GetType())
			legacyWriteData(&b, data)
			return b.Bytes(), nil
		}
		data, err := m.JSONPb.Marshal(chunk["result"])
		if err != nil {
			return nil, err
		}
		legacyWriteData(&b, data)
		return b.Bytes(), nil
	case map[string]proto.Message:
		data, err := m.JSONPb.Marshal(chunk["error"])
		if err != nil {
			return nil, err
		}
		b.WriteString("event: error\n")
		legacyWriteData(&b, data)
		return b.Bytes(), nil
	default:
		return m.JSONPb.Marshal(v)
	}
}

func legacyWriteData(b *bytes.Buffer, data []byte) {
	for i, line := range strings.Split(string(data), "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("data: ")
		b.WriteString(line)
	}
}

// Every kind of event, and errors, encode as the marshaler before encoded
// them; the native stream's frame is the gateway's frame and delimiter.
func TestSSEFramesUnchanged(t *testing.T) {
	m := sse.NewMarshaler()
	now := time.Date(2026, 11, 30, 7, 1, 2, 345678901, time.UTC)
	var evs []session.Event
	for i, typ := range []string{session.EventAgentStart, session.EventMessageStart, session.EventMessageUpdate, session.EventMessageEnd,
		session.EventToolCall, session.EventAgentEnd, session.EventAutoRetryStart, session.EventAutoRetryEnd,
		session.EventRetryFallbackApplied, session.EventRetryFallbackSucceeded, session.EventModelChange,
		session.EventCredentialSwitched, session.EventContextOverflow, session.EventPromptEnd, "unknown_type"} {
		e := session.Event{SessionID: "ses_x", Seq: uint64(i + 1), Time: now, Type: typ, PromptID: "prm_y"}
		e.Role, e.Model, e.Credential = "assistant", "sim/echo", "c1"
		e.TextDelta, e.ThinkingDelta = "a \"quoted\"\nline <b>&</b> é 😀\u2028", "t"
		e.ToolCallDelta = &session.ToolCallDelta{CallID: "call", Name: "n", InputDelta: `{"a":`}
		e.StopReason, e.ErrorMessage, e.StopDetails, e.Text, e.ErrorClass = "end_turn", "boom\r\nx", "refusal", "full", "transient"
		e.ToolCall = &session.ToolCall{CallID: "c", Name: "get", Input: json.RawMessage(`{"b":[1,2.5,"x\n"],"a":null}`)}
		e.Attempt, e.MaxAttempts, e.Delay, e.DelaySource, e.Success, e.FinalError = 2, 3, 1500*time.Millisecond, "header", i%2 == 0, "f"
		e.From, e.To, e.Reason, e.Provider, e.Outcome, e.Error = "a", "b", "r", "p", "completed", "e"
		evs = append(evs, e)
	}
	evs = append(evs, session.Event{Seq: 1 << 62, Type: session.EventMessageUpdate}) // zero values
	s := &sseStream{m: m}
	for _, e := range evs {
		pe := convert.EventToProto(&e)
		want, err := legacyMarshal(m, map[string]any{"result": pe})
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.Marshal(map[string]any{"result": pe})
		if err != nil || !sameFrame(got, want) {
			t.Fatalf("%s: gateway frame\n%q, want\n%q (%v)", e.Type, got, want, err)
		}
		native, err := s.frame(nil, pe)
		if err != nil || string(native) != string(got)+"\n\n" {
			t.Fatalf("%s: native frame\n%q, want\n%q (%v)", e.Type, native, got, err)
		}
	}
	// Other messages (NDJSON results stay on the gateway) and errors.
	for _, v := range []any{
		map[string]any{"result": &agentdv1.Session{Id: "x"}},
		map[string]any{"result": structpb.NewStringValue("a\nb")},
		map[string]proto.Message{"error": &agentdv1.Session{Id: "e"}},
		&agentdv1.Session{Id: "plain"},
	} {
		want, err1 := legacyMarshal(m, v)
		got, err2 := m.Marshal(v)
		if !bytes.Equal(got, want) || (err1 == nil) != (err2 == nil) {
			t.Fatalf("%v: %q, want %q", v, got, want)
		}
	}
	// A string that is not UTF-8: the gRPC server refused it first.
	if _, err := s.frame(nil, &agentdv1.Event{Type: "x\xff"}); err == nil || !strings.Contains(err.Error(), "grpc: error while marshaling") {
		t.Fatalf("invalid UTF-8: %v", err)
	}
}

// sameFrame reports whether two SSE frames are the same: the same lines but
// for the data, which is the same JSON tokens (protojson adds random spaces
// after commas in some builds; sse.AppendEventJSON never does).
func sameFrame(a, b []byte) bool {
	pa, da, _ := bytes.Cut(a, []byte("data: "))
	pb, db, _ := bytes.Cut(b, []byte("data: "))
	return bytes.Equal(pa, pb) && bytes.Count(da, []byte("\n")) == bytes.Count(db, []byte("\n")) &&
		slices.Equal(testkit.JSONTokens(da), testkit.JSONTokens(db))
}

// The frames shared between the readers of a session are the frames each
// would encode; a slot serves only the very event it holds.
func TestFrameCache(t *testing.T) {
	c := newFrameCache()
	m := sse.NewMarshaler()
	r1 := &sseStream{m: m, frames: c}
	r2 := &sseStream{m: m, frames: c}
	e := session.Event{SessionID: "ses_1", Seq: 7, Type: session.EventMessageUpdate, TextDelta: "x"}
	f1, _ := r1.sessionFrame(&e)
	if r1.shared.active() || c.sessions["ses_1"].slots != nil {
		t.Fatal("one reader: frames are shared")
	}
	f1 = bytes.Clone(f1)
	r2.sessionFrame(&session.Event{SessionID: "ses_1", Seq: 1}) // joins
	f2, _ := r2.sessionFrame(&e)
	f3, _ := r1.sessionFrame(&e)
	if !bytes.Equal(f1, f2) || &f2[0] != &f3[0] {
		t.Fatal("two readers: the frame is not shared")
	}
	changed := e
	changed.TextDelta = "y"
	if f4, _ := r1.sessionFrame(&changed); bytes.Equal(f4, f3) {
		t.Fatal("a slot served another event of the same seq")
	}
	r2.shared.leave()
	if c.sessions["ses_1"].slots != nil {
		t.Fatal("frames kept for one reader")
	}
	r1.shared.leave()
	if len(c.sessions) != 0 {
		t.Fatalf("sessions left: %v", c.sessions)
	}
}

// 5000 sessions' readers join and leave: the cache's map is copied
// smaller on the way down (Go's maps keep their buckets), and the readers
// still there keep their place in it.
func TestFrameCacheShrinks(t *testing.T) {
	c := newFrameCache()
	var sfs []*sessionFrames
	for i := range 5000 {
		sfs = append(sfs, c.join(fmt.Sprint("ses_", i)))
	}
	keep := c.join("ses_0") // a second reader of ses_0
	for _, sf := range sfs[:4990] {
		sf.leave()
	}
	if c.peak > 1250 {
		t.Fatalf("peak %d after 4990 of 5000 readers left: the map was not copied smaller", c.peak)
	}
	if len(c.sessions) != 11 || c.sessions["ses_0"] != keep || c.sessions["ses_4999"] != sfs[4999] {
		t.Fatalf("%d sessions after the readers left, want the 11 still read", len(c.sessions))
	}
	for _, sf := range append(sfs[4990:], keep) {
		sf.leave()
	}
	if len(c.sessions) != 0 {
		t.Fatalf("sessions left: %d", len(c.sessions))
	}
}

// The gRPC server's metrics (grpc_server_*) see the native streams as they
// saw the gateway's calls: the same calls, codes and message counts.
func TestNativeSSEMetricsMatchGateway(t *testing.T) {
	scenario := func(via string) []string {
		ts := startSSE(t, sseAuth)
		id := ts.session(t, sseTokenA, "")
		ts.open(t, via, "POST", "/v1/sessions/"+id+":prompt", []string{sseAccept, bearerA}, `{"text":"a b c"}`).all()
		ts.sameEnd(t, via, "GET", "/v1/sessions/"+id+"/events", []string{sseAccept, bearerA}, func() {
			ts.do(t, "DELETE", "/v1/sessions/"+id, "", sseTokenA)
		})
		ts.open(t, via, "GET", "/v1/sessions/"+missingID+"/events", []string{sseAccept, bearerA}, "").all()
		ts.open(t, via, "GET", "/v1/sessions/"+missingID+"/events", []string{sseAccept}, "").all()
		ts.open(t, via, "POST", "/v1/sessions/"+missingID+":prompt", []string{sseAccept, bearerA}, `{"text":"x"}`).all()
		resp, err := http.Get(ts.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "grpc_server_") && !strings.Contains(line, "_bucket") && !strings.Contains(line, "_sum") &&
				!strings.HasSuffix(line, " 0") {
				out = append(out, line)
			}
		}
		return out
	}
	gw, nat := scenario("gateway"), scenario("")
	if strings.Join(gw, "\n") != strings.Join(nat, "\n") {
		t.Fatalf("grpc_server_* differ\ngateway:\n%s\nnative:\n%s", strings.Join(gw, "\n"), strings.Join(nat, "\n"))
	}
	if !strings.Contains(strings.Join(nat, "\n"), `grpc_server_msg_sent_total{grpc_method="StreamEvents",grpc_service="agentd.v1.AgentService",grpc_type="server_stream"}`) {
		t.Fatalf("no StreamEvents messages counted:\n%s", strings.Join(nat, "\n"))
	}
}

// waitReaders waits until tenant's session id has n event readers.
func (ts *sseTestServer) waitReaders(t testing.TB, tenant, id string, n int) {
	t.Helper()
	sess, err := ts.srv.Sessions().Get(context.Background(), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyErr(t, "the session's readers subscribed", func() error {
		if got := sess.Subscribers(); got < n {
			return fmt.Errorf("%d readers of %s, want %d", got, id, n)
		}
		return nil
	})
}

// sameEnd opens one stream through via and ends it with end.
func (ts *sseTestServer) sameEnd(t *testing.T, via, method, target string, headers []string, end func()) string {
	t.Helper()
	c := ts.open(t, via, method, target, headers, "")
	c.until("\r\n\r\n")
	end()
	return c.all()
}

// A native SSE stream costs its connection's two goroutines (the handler's
// and net/http's reader), pings included; a client that goes away ends it.
func TestNativeSSEGoroutines(t *testing.T) {
	ts := startSSE(t, "http: {sse_heartbeat_ms: 20}\n")
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ts.session(t, "", "hi")
	}
	base := runtime.NumGoroutine()
	var conns []*rawConn
	for _, id := range ids {
		c := ts.open(t, "", "GET", "/v1/sessions/"+id+"/events", []string{sseAccept}, "")
		c.until("event: prompt_end")
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.until(": ping\n\n\r\n8\r\n: ping\n\n") // pings after the replay, and between
	}
	// Timers' callbacks and other tests' ending goroutines come and go, so
	// the count must fall within the bound at some point, not at once. A
	// goroutine per stream more would keep it at 3n at least (the
	// gateway's path took 5n), and the wait would fail.
	testkit.EventuallyErr(t, "two goroutines a stream", func() error {
		if d := runtime.NumGoroutine() - base; d > 2*n+n/2 {
			return fmt.Errorf("%d goroutines for %d streams", d, n)
		}
		return nil
	})
	for _, c := range conns {
		c.conn.Close()
	}
	for i, id := range ids {
		sess, _ := ts.srv.Sessions().Get(context.Background(), LocalTenant, id)
		testkit.Eventually(t, fmt.Sprintf("stream %d ended after its client went away", i), func() bool {
			return sess.Subscribers() == 0
		})
	}
}

// The memoized header matcher answers as the matcher itself for every key
// it keeps and for others, in any case.
func TestMemoHeadersMatchesTheMatcher(t *testing.T) {
	memo := memoHeaders(matchHeader, commonHeaders)
	keys := append(slices.Clone(commonHeaders), "X-Custom", "Grpc-Metadata-Foo", "Grpc-Timeout", "")
	for _, k := range keys {
		for _, v := range []string{k, strings.ToLower(k), strings.ToUpper(k)} {
			gk, gok := memo(v)
			wk, wok := matchHeader(v)
			if gk != wk || gok != wok {
				t.Errorf("%q: memo %q %v, matcher %q %v", v, gk, gok, wk, wok)
			}
		}
	}
	if k, ok := memo("Last-Event-Id"); !ok || k != lastEventIDKey {
		t.Errorf("Last-Event-Id: %q %v", k, ok)
	}
	if k, ok := memo("Accept"); !ok || k != gwruntime.MetadataPrefix+"Accept" {
		t.Errorf("Accept: %q %v", k, ok)
	}
	if _, ok := memo("Content-Length"); ok {
		t.Error("Content-Length is forwarded")
	}
}
