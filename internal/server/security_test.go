package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
)

// Regression tests of the hostile-tenant and unlucky-operator findings:
// each sends the request that did harm and checks the answer and that
// nothing changed.

// countSessions lists a tenant's sessions over REST, following every page.
func countSessions(t *testing.T, ctx context.Context, base, token string) int {
	t.Helper()
	n, page := 0, ""
	for {
		out := webJSON(t, ctx, "GET", base+"/v1/sessions?pageSize=1000&pageToken="+page, "", token, nil, 200)
		list, _ := out["sessions"].([]any)
		n += len(list)
		page, _ = out["nextPageToken"].(string)
		if page == "" {
			return n
		}
	}
}

// countingBody is an endless request body that counts what the server
// took of it.
type countingBody struct {
	n, limit int64
	read     atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.n >= b.limit {
		return 0, io.EOF
	}
	k := min(int64(len(p)), b.limit-b.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	b.n += k
	b.read.Add(k)
	return int(k), nil
}

// An unauthenticated client's body is never read: a 100 MB POST without a
// token is answered 401 at once, having taken at most what the socket
// buffers hold.
func TestUnauthenticatedBodyIsNotRead(t *testing.T) {
	ts := start(t, webAuth)
	ctx := testkit.Context(t)
	for _, path := range []string{"/v1/credentials", "/v1/sessions", "/v1/sessions/ses_aaaaaaaaaaaaaaaaaaaaaaaaaa:prompt"} {
		body := &countingBody{limit: 100 << 20}
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.baseURL+path, body)
		req.ContentLength = body.limit
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// The server may close before the client has written all: that
			// is the point. Then no answer is read; the byte count says it.
			t.Logf("%s: %v", path, err)
		} else {
			wantStatus(t, resp, 401, codes.Unauthenticated, "missing bearer token")
		}
		if got := body.read.Load(); got > 16<<20 {
			t.Errorf("%s: the server took %d bytes of an unauthenticated body", path, got)
		}
	}
	if n := countSessions(t, ctx, ts.baseURL, webTokenA); n != 0 {
		t.Errorf("%d sessions after refused requests", n)
	}
}

// peakRSS resets the process's peak resident size (VmHWM) and returns a
// function that reads it: the most memory the process held in between.
func peakRSS(t *testing.T) func() int64 {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
	return func() int64 { return procStatus(t, "VmHWM:") }
}

func rssBytes(t *testing.T) int64 {
	t.Helper()
	return procStatus(t, "VmRSS:")
}

func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no " + field)
	return 0
}

// Parallel 100 MB uploads, without a token and with one (over the request
// limit), leave the process's memory where it was, give or take a generous
// margin: six of them once took RSS from 1.45 to 2.07 GB. The peak is
// measured, not the end: a body buffered then freed counts.
func TestParallelHugeUploadsKeepMemoryBounded(t *testing.T) {
	ts := start(t, webAuth)
	ctx := testkit.Context(t)
	runtime.GC()
	debug.FreeOSMemory()
	before := rssBytes(t)
	peak := peakRSS(t)
	var wg sync.WaitGroup
	codes := make(chan int, 6)
	for i := range 6 {
		wg.Go(func() {
			body := &countingBody{limit: 100 << 20}
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.baseURL+"/v1/sessions", body)
			req.Header.Set("Content-Type", "application/json")
			if i%2 == 0 {
				req.Header.Set("Authorization", "Bearer "+webTokenA) // over limits.max_request_bytes: 413
			} else {
				req.ContentLength = body.limit // no token: 401
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 0 && c != 401 && c != 413 {
			t.Errorf("status %d, want 401 or 413", c)
		}
	}
	after := peak()
	t.Logf("RSS %d MiB before, peak %d MiB over 6 parallel 100 MB uploads", before>>20, after>>20)
	if grew := after - before; grew > 400<<20 {
		t.Errorf("the peak RSS grew by %d MiB over 6 parallel 100 MB uploads (600 MB): the bodies were buffered", grew>>20)
	}
	if n := countSessions(t, ctx, ts.baseURL, webTokenA); n != 0 {
		t.Errorf("%d sessions after refused requests", n)
	}
}

// A body over limits.max_request_bytes is REST 413 naming the limit (it
// was 429 past 4 MB, which clients retry), whether its length is announced
// or not; over gRPC it is RESOURCE_EXHAUSTED. Nothing changes.
func TestRequestOverTheLimit(t *testing.T) {
	ts := start(t, webAuth+"limits: {max_request_bytes: 65536}\nsessions: {max_prompt_bytes: 65536}\n")
	ctx := testkit.Context(t)
	id := webSession(t, ctx, ts.baseURL, webTokenA)
	big := `{"text":"` + strings.Repeat("x", 70000) + `"}`
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(big)
		if chunked {
			body = io.MultiReader(strings.NewReader(big)) // no length known: chunked
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.baseURL+"/v1/sessions/"+id+":prompt", body)
		req.Header.Set("Authorization", "Bearer "+webTokenA)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, resp, 413, codes.ResourceExhausted, "limits.max_request_bytes (65536 bytes)")
	}
	// The refusal reads as the gateway's errors do, details included.
	resp413 := webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+id+":prompt", big, webTokenA, nil)
	if b, _ := io.ReadAll(resp413.Body); !strings.Contains(string(b), `"details":[]`) {
		t.Errorf("413 body %s: want the gateway's error shape", b)
	}
	resp413.Body.Close()
	// 12 MB, as in the finding: 413, not 429.
	resp := webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions", `{"model":"sim/echo","systemPrompt":"`+strings.Repeat("y", 12_000_000)+`"}`, webTokenA, nil)
	wantStatus(t, resp, 413, codes.ResourceExhausted, "limits.max_request_bytes")

	gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+webTokenA)
	_, err := ts.agent.CreateSession(gctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", SystemPrompt: strings.Repeat("z", 70000)})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "65536") {
		t.Errorf("gRPC over the limit: %v, want RESOURCE_EXHAUSTED naming 65536", err)
	}
	msgs := webJSON(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/messages", "", webTokenA, nil, 200)
	if m, _ := msgs["messages"].([]any); len(m) != 0 {
		t.Errorf("history after refused prompts: %v", m)
	}
	if n := countSessions(t, ctx, ts.baseURL, webTokenA); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
}

// An unauthenticated gRPC call is refused before its message is read: a
// message over the limit without a token is UNAUTHENTICATED.
func TestGRPCUnauthenticatedBeforeRead(t *testing.T) {
	ts := start(t, webAuth+"limits: {max_request_bytes: 65536}\nsessions: {max_prompt_bytes: 65536}\n")
	ctx := testkit.Context(t)
	_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", SystemPrompt: strings.Repeat("z", 1<<20)})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token, big message: %v, want UNAUTHENTICATED", err)
	}
	conn, err := grpc.NewClient(ts.srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := agentdv1.NewAgentServiceClient(conn).Prompt(ctx, &agentdv1.PromptRequest{SessionId: "ses_aaaaaaaaaaaaaaaaaaaaaaaaaa", Text: strings.Repeat("z", 1<<20)})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token, big stream request: %v, want UNAUTHENTICATED", err)
	}
}

// A body that trickles in is cut off after limits.body_timeout_ms: 408
// (it once held a handler for 70 s).
func TestSlowBodyTimesOut(t *testing.T) {
	ts := start(t, webAuth+"limits: {body_timeout_ms: 200}\n")
	ctx := testkit.Context(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.baseURL+"/v1/sessions", pr)
	req.ContentLength = 500
	req.Header.Set("Authorization", "Bearer "+webTokenA)
	req.Header.Set("Content-Type", "application/json")
	go pw.Write([]byte(`{"model":`)) // then nothing more
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, resp, 408, codes.DeadlineExceeded, "limits.body_timeout_ms (200 ms)")
	if n := countSessions(t, ctx, ts.baseURL, webTokenA); n != 0 {
		t.Errorf("%d sessions after a timed-out request", n)
	}
}

// Answers stay readable however big a session grows: ListMessages after
// five 1 MB prompts (it answered 429 forever past 4 MB) and ListSessions
// over six 1 MB system prompts come in pages bounded by bytes, which
// together hold everything.
func TestBigHistoriesAndListingsArePaged(t *testing.T) {
	ts := start(t, webAuth+"limits: {max_system_prompt_bytes: 1100000}\n")
	ctx := testkit.Context(t)
	id := webSession(t, ctx, ts.baseURL, webTokenA)
	mb := strings.Repeat("m", 1_000_000)
	for range 5 {
		promptSSE(t, ctx, ts.baseURL, id, webTokenA, `{"text":"`+mb+`"}`)
	}
	var all int
	pages := 0
	for page := ""; ; pages++ {
		resp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/messages?pageToken="+page, "", webTokenA, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("ListMessages page %d: %d %.200s", pages, resp.StatusCode, b)
		}
		var out struct {
			Messages      []json.RawMessage `json:"messages"`
			NextPageToken string            `json:"nextPageToken"`
		}
		json.Unmarshal(b, &out)
		all += len(out.Messages)
		if len(b) > 4<<20 {
			t.Errorf("a page of %d bytes", len(b))
		}
		if page = out.NextPageToken; page == "" {
			break
		}
	}
	if all != 10 || pages < 2 {
		t.Errorf("%d messages in %d pages, want 10 in several", all, pages+1)
	}

	for range 6 {
		webJSON(t, ctx, "POST", ts.baseURL+"/v1/sessions", `{"model":"sim/echo","systemPrompt":"`+mb+`"}`, webTokenA, nil, 200)
	}
	if n := countSessions(t, ctx, ts.baseURL, webTokenA); n != 7 {
		t.Errorf("%d sessions listed, want 7", n)
	}
}

// promptSSE sends a prompt as an event stream and reads it to its
// prompt_end.
func promptSSE(t *testing.T, ctx context.Context, base, id, token, body string) {
	t.Helper()
	resp := webReq(t, ctx, "POST", base+"/v1/sessions/"+id+":prompt", body, token, http.Header{"Accept": {"text/event-stream"}})
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("prompt: %d %.300s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for sc.Scan() {
		if sc.Text() == "event: prompt_end" {
			return
		}
	}
	t.Fatalf("prompt: the stream ended without prompt_end: %v", sc.Err())
}

// Page tokens are opaque and bound to their tenant and listing: no creation
// counter shows through, and another tenant's (or an altered) token is
// refused.
func TestPageTokensAreOpaqueAndTenantBound(t *testing.T) {
	ts := start(t, webAuth)
	ctx := testkit.Context(t)
	for range 3 {
		webSession(t, ctx, ts.baseURL, webTokenA)
	}
	webSession(t, ctx, ts.baseURL, webTokenB)
	out := webJSON(t, ctx, "GET", ts.baseURL+"/v1/sessions?pageSize=1", "", webTokenA, nil, 200)
	tok, _ := out["nextPageToken"].(string)
	if tok == "" {
		t.Fatal("no next page token")
	}
	// The position ("o1", the engine's form) is not in it, neither plain
	// nor encoded: a sealed token is a random nonce and a ciphertext (a
	// random run of characters may hold "o1" by chance, so the position is
	// looked for where an unsealed token would carry it), and the same
	// page's token differs from call to call.
	body := strings.TrimPrefix(tok, "p1.")
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(body); err == nil && (string(b) == "o1" || strings.HasPrefix(string(b), "o1\x00")) {
			t.Errorf("the token %q shows its position", tok)
		}
	}
	if body == "o1" || len(body) < 40 {
		t.Errorf("the token %q is not sealed (%d characters)", tok, len(body))
	}
	again := webJSON(t, ctx, "GET", ts.baseURL+"/v1/sessions?pageSize=1", "", webTokenA, nil, 200)
	if tok2, _ := again["nextPageToken"].(string); tok2 == tok {
		t.Errorf("the same page's token twice: %q (no nonce)", tok)
	}
	// The owner goes on with it.
	webJSON(t, ctx, "GET", ts.baseURL+"/v1/sessions?pageSize=1&pageToken="+tok, "", webTokenA, nil, 200)
	// Another tenant, the old plain form, an altered token: refused.
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions?pageToken="+tok, "", webTokenB, nil), 400, codes.InvalidArgument, "page_token")
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions?pageToken=o1", "", webTokenA, nil), 400, codes.InvalidArgument, "page_token")
	alt := tok[:len(tok)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(tok, "AA")]
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions?pageToken="+alt, "", webTokenA, nil), 400, codes.InvalidArgument, "page_token")
	// A session's messages token is for that session only.
	id1 := webSession(t, ctx, ts.baseURL, webTokenA)
	id2 := webSession(t, ctx, ts.baseURL, webTokenA)
	promptSSE(t, ctx, ts.baseURL, id1, webTokenA, `{"text":"hi"}`)
	m := webJSON(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id1+"/messages?pageSize=1", "", webTokenA, nil, 200)
	mtok, _ := m["nextPageToken"].(string)
	if mtok == "" {
		t.Fatal("no messages page token")
	}
	webJSON(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id1+"/messages?pageToken="+mtok, "", webTokenA, nil, 200)
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id2+"/messages?pageToken="+mtok, "", webTokenA, nil), 400, codes.InvalidArgument, "page_token")
}

// The authorization scheme is case-insensitive (RFC 7235), over REST and
// gRPC.
func TestBearerSchemeAnyCase(t *testing.T) {
	ts := start(t, webAuth)
	ctx := testkit.Context(t)
	for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		resp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions", "", "", http.Header{"Authorization": {scheme + " " + webTokenA}})
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", scheme, resp.StatusCode)
		}
		resp.Body.Close()
		gctx := metadata.AppendToOutgoingContext(ctx, "authorization", scheme+" "+webTokenA)
		if _, err := ts.agent.ListSessions(gctx, &agentdv1.ListSessionsRequest{}); err != nil {
			t.Errorf("gRPC %s: %v", scheme, err)
		}
	}
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions", "", "", http.Header{"Authorization": {"Basic " + webTokenA}}),
		401, codes.Unauthenticated, "Bearer <token>")
}

// A huge invalid id is not echoed whole.
func TestHugeInvalidInputIsNotEchoed(t *testing.T) {
	ts := start(t, webAuth)
	ctx := testkit.Context(t)
	huge := strings.Repeat("A", 100_000)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/" + huge, ""},
		{"POST", "/v1/credentials", `{"provider":"sim","secret":"x","id":"` + huge + `"}`},
		{"GET", "/v1/sessions?pageToken=" + huge, ""},
		{"POST", "/v1/sessions", `{"model":"` + huge + `"}`},
		{"POST", "/v1/sessions", `{"model":"sim/echo","role":"` + huge + `"}`},
	} {
		resp := webReq(t, ctx, c.method, ts.baseURL+c.path, c.body, webTokenA, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || len(b) > 2000 {
			t.Errorf("%s %.40s…: %d, %d bytes: %.300s", c.method, c.path, resp.StatusCode, len(b), b)
		}
	}
}

// Local mode (no tokens) answers this machine only: a Host that is not a
// loopback name is refused (DNS rebinding listed sessions), and a browser
// page elsewhere cannot change anything (a text/plain POST from
// http://evil.com added a credential). The console's own requests, curl's
// and configured origins still work.
func TestLocalModeBrowserGuards(t *testing.T) {
	ts := start(t, "http: {cors: {allowed_origins: [\"http://app.example:3000\"]}, allowed_hosts: [agentd.internal]}\n")
	ctx := testkit.Context(t)
	creds := func() int {
		out := webJSON(t, ctx, "GET", ts.baseURL+"/v1/credentials", "", "", nil, 200)
		list, _ := out["credentials"].([]any)
		return len(list)
	}
	before := creds()
	do := func(method, path, body string, h http.Header) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, method, ts.baseURL+path, strings.NewReader(body))
		for k, v := range h {
			if k == "Host" {
				req.Host = v[0]
				continue
			}
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	cred := `{"provider":"sim","secret":"bogus-secret-1234","id":"evil"}`
	for _, c := range []struct {
		name string
		h    http.Header
		msg  string
	}{
		{"foreign origin, text/plain", http.Header{"Origin": {"http://evil.com"}, "Content-Type": {"text/plain"}}, "Origin"},
		{"foreign origin, JSON", http.Header{"Origin": {"http://evil.com"}, "Content-Type": {"application/json"}}, "Origin"},
		{"null origin", http.Header{"Origin": {"null"}, "Content-Type": {"application/json"}}, "Origin"},
		{"same origin, form", http.Header{"Origin": {ts.baseURL}, "Content-Type": {"application/x-www-form-urlencoded"}}, "Content-Type"},
		{"no origin, cross-site fetch", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Content-Type": {"application/json"}}, "Sec-Fetch-Site"},
		{"a browser's form, by its fetch mode alone", http.Header{"Sec-Fetch-Mode": {"no-cors"}, "Content-Type": {"text/plain"}}, "Content-Type"},
		{"rebinding host", http.Header{"Host": {"attacker.example:8080"}, "Content-Type": {"application/json"}}, "Host"},
	} {
		wantStatus(t, do("POST", "/v1/credentials", cred, c.h), 403, codes.PermissionDenied, c.msg)
	}
	wantStatus(t, do("GET", "/v1/sessions", "", http.Header{"Host": {"attacker.example"}}), 403, codes.PermissionDenied, "Host")
	wantStatus(t, do("DELETE", "/v1/credentials/x", "", http.Header{"Origin": {"https://evil.com"}}), 403, codes.PermissionDenied, "Origin")
	if n := creds(); n != before {
		t.Fatalf("credentials %d -> %d after refused requests", before, n)
	}
	// Allowed: the console (same origin, JSON), a configured origin, curl
	// (no browser headers, its default form content type), a configured
	// host and the loopback names.
	for _, h := range []http.Header{
		{"Origin": {ts.baseURL}, "Content-Type": {"application/json"}},
		{"Origin": {"http://app.example:3000"}, "Content-Type": {"application/json"}},
		{"Content-Type": {"application/x-www-form-urlencoded"}},
		{"Host": {"agentd.internal"}, "Content-Type": {"application/json"}},
		{"Host": {"localhost:1"}, "Content-Type": {"application/json"}},
		{"Host": {"[::1]:1"}, "Content-Type": {"application/json"}},
	} {
		resp := do("POST", "/v1/sessions", `{"model":"sim/echo"}`, h)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%v: %d %s", h, resp.StatusCode, b)
		}
	}
	resp := do("GET", "/console/", "", http.Header{"Host": {"attacker.example"}})
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("the console for a foreign Host: %d", resp.StatusCode)
	}
}

// metrics.listen moves /metrics off the public port.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	ts := start(t, "metrics: {listen: 127.0.0.1:0}\n")
	ctx := testkit.Context(t)
	resp := webReq(t, ctx, "GET", ts.baseURL+"/metrics", "", "", nil)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("/metrics on the HTTP port: %d, want 404", resp.StatusCode)
	}
	resp = webReq(t, ctx, "GET", fmt.Sprintf("http://%s/metrics", ts.srv.MetricsAddr()), "", "", nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "agentd_sessions_active") {
		t.Errorf("/metrics on metrics.listen: %d %.200s", resp.StatusCode, b)
	}
}

// rawCodec sends and receives a call's message as the bytes given: a
// client that writes what protobuf would refuse to encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// A gRPC request with a string that is not UTF-8, at the top of the
// message or nested, unary or streaming, is INVALID_ARGUMENT naming the
// field (grpc-go alone answers INTERNAL, "failed to unmarshal"); nothing is
// created or run, and the same call well formed then works.
func TestGRPCInvalidUTF8NamesTheField(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	msg := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	call := func(method string, req []byte) error {
		var out []byte
		return ts.conn.Invoke(ctx, method, &req, &out, grpc.ForceCodec(rawCodec{}))
	}
	sess, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	// CreateSessionRequest: model 1, system_prompt 3, retry 4 (its
	// fallback_chains 6, a map: the entry's key 1).
	retry := msg(6, str(1, "role\xff"))
	for _, tc := range []struct {
		method, field string
		req           []byte
	}{
		{"/agentd.v1.AgentService/CreateSession", "model", str(1, "sim/echo\xff")},
		{"/agentd.v1.AgentService/CreateSession", "retry.fallback_chains.key", append(str(1, "sim/echo"), msg(4, retry)...)},
		{"/agentd.v1.AgentService/GetSession", "session_id", str(1, sess.GetId()+"\xc3")},
	} {
		err := call(tc.method, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field+": not valid UTF-8") {
			t.Errorf("%s with %s not UTF-8 = %v, want INVALID_ARGUMENT naming it", tc.method, tc.field, err)
		}
	}
	// A streaming call: Prompt (session_id 1, text 2).
	desc := &grpc.StreamDesc{ServerStreams: true}
	stream, err := ts.conn.NewStream(ctx, desc, "/agentd.v1.AgentService/Prompt", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	req := append(str(1, sess.GetId()), str(2, "hello \xed\xa0\x80")...) // a UTF-16 surrogate, UTF-8-encoded
	if err := stream.SendMsg(&req); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := stream.RecvMsg(&out); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "text: not valid UTF-8") {
		t.Fatalf("Prompt with text not UTF-8 = %v, want INVALID_ARGUMENT naming text", err)
	}
	list, err := ts.agent.ListSessions(ctx, &agentdv1.ListSessionsRequest{})
	if err != nil || len(list.GetSessions()) != 1 {
		t.Fatalf("sessions after the refused calls: %v, %v", list, err)
	}
	msgs, err := ts.agent.ListMessages(ctx, &agentdv1.ListMessagesRequest{SessionId: sess.GetId()})
	if err != nil || len(msgs.GetMessages()) != 0 {
		t.Fatalf("history after the refused prompt: %v, %v", msgs, err)
	}
	if n := ts.srv.PendingUTF8(); n != 0 {
		t.Errorf("%d refused requests are still held", n)
	}
	// Well formed, the same prompt runs.
	ok, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if evs := collect(t, ok); evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("the prompt after: %v", evs[len(evs)-1])
	}
}

// A gRPC call's metadata is bounded as the HTTP face's headers are (1 MiB):
// the server says so in its HTTP/2 settings, and a client that sends a
// bigger header list anyway (grpc-go's own client would refuse to) has its
// stream reset, before any token is checked; the server goes on serving.
func TestGRPCHeadersAreBounded(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", ts.srv.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if v, has := sf.Value(http2.SettingMaxHeaderListSize); !ok || !has || v != 1<<20 {
		t.Fatalf("the server's first frame %v: SETTINGS_MAX_HEADER_LIST_SIZE %d (set: %t); want 1 MiB", f, v, has)
	}

	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/agentd.v1.AgentService/ListSessions"},
		{":authority", "127.0.0.1"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {"x-big", strings.Repeat("a", 2<<20)}} {
		if err := enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]}); err != nil {
			t.Fatal(err)
		}
	}
	const frag = 16 << 10
	b := block.Bytes()
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:frag]}); err != nil {
		t.Fatal(err)
	}
	for b = b[frag:]; len(b) > 0; {
		n := min(frag, len(b))
		if err := fr.WriteContinuation(1, n == len(b), b[:n]); err != nil {
			break // the server may have reset the stream or closed the connection already
		}
		b = b[n:]
	}
	_ = fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}) // an empty ListSessionsRequest
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break // the connection closed: refused too
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.StreamID != 1 {
				continue
			}
		case *http2.GoAwayFrame:
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				t.Fatalf("a call with 2 MiB of metadata was answered: %v", f.Fields)
			}
			continue
		default:
			continue
		}
		break
	}
	if _, err := ts.agent.ListSessions(ctx, &agentdv1.ListSessionsRequest{}); err != nil {
		t.Fatalf("the server after the refused call: %v", err)
	}
}
