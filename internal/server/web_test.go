package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/testkit"
)

const (
	webTokenA = "token-team-a-0123456789"
	webTokenB = "token-team-b-0123456789"
	webAuth   = "auth: {tokens: [{token: " + webTokenA + ", tenant: team-a}, {token: " + webTokenB + ", tenant: team-b}]}\n"
)

// webReq sends a request; token, when set, goes in the authorization header.
func webReq(t *testing.T, ctx context.Context, method, u, body, token string, header http.Header) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// webJSON sends a request and decodes the answer; it fails unless the status
// is want.
func webJSON(t *testing.T, ctx context.Context, method, u, body, token string, header http.Header, want int) map[string]any {
	t.Helper()
	resp := webReq(t, ctx, method, u, body, token, header)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s = %d %s, want %d", method, u, resp.StatusCode, b, want)
	}
	var out map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: %q: %v", method, u, b, err)
		}
	}
	return out
}

func webSession(t *testing.T, ctx context.Context, base, token string) string {
	t.Helper()
	return webJSON(t, ctx, "POST", base+"/v1/sessions", `{"model":"sim/echo"}`, token, nil, 200)["id"].(string)
}

// webFrame is one SSE frame; a comment frame has only comment set.
type webFrame struct {
	id, event, comment string
	data               map[string]any
}

// webFrames reads SSE frames (comments included) off one response.
type webFrames struct {
	t  *testing.T
	sc *bufio.Scanner
}

func newWebFrames(t *testing.T, body io.Reader) *webFrames {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &webFrames{t: t, sc: sc}
}

// next returns the next frame, or false at the end of the body.
func (r *webFrames) next() (webFrame, bool) {
	r.t.Helper()
	var f webFrame
	var data strings.Builder
	seen := false
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if !seen {
				continue
			}
			if data.Len() > 0 {
				if err := json.Unmarshal([]byte(data.String()), &f.data); err != nil {
					r.t.Fatalf("frame data %q: %v", data.String(), err)
				}
			}
			return f, true
		case strings.HasPrefix(line, ":"):
			f.comment = strings.TrimSpace(strings.TrimPrefix(line, ":"))
		case strings.HasPrefix(line, "id: "):
			f.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			f.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data.WriteString(strings.TrimPrefix(line, "data: "))
		default:
			r.t.Fatalf("unexpected SSE line %q", line)
		}
		seen = true
	}
	return f, false
}

// until reads frames up to the first event of type typ, skipping comments.
func (r *webFrames) until(typ string) []webFrame {
	r.t.Helper()
	var out []webFrame
	for {
		f, ok := r.next()
		if !ok {
			r.t.Fatalf("stream ended before %s (got %d frames)", typ, len(out))
		}
		if f.event == "" {
			continue
		}
		out = append(out, f)
		if f.event == typ {
			return out
		}
	}
}

// missingSession is a well-formed id of no session.
const missingSession = "ses_aaaaaaaaaaaaaaaaaaaaaaaaaa"

var sseAccept = http.Header{"Accept": {"text/event-stream"}}

// Every REST route, with a method it serves, for the preflight checks.
var restRoutes = []struct{ method, path string }{
	{"POST", "/v1/sessions"},
	{"GET", "/v1/sessions"},
	{"GET", "/v1/sessions/ses_x"},
	{"DELETE", "/v1/sessions/ses_x"},
	{"POST", "/v1/sessions/ses_x:prompt"},
	{"GET", "/v1/sessions/ses_x/events"},
	{"POST", "/v1/sessions/ses_x:abort"},
	{"POST", "/v1/sessions/ses_x:abortRetry"},
	{"POST", "/v1/sessions/ses_x:setAutoRetry"},
	{"GET", "/v1/sessions/ses_x/messages"},
	{"POST", "/v1/sessions/ses_x:submitToolResults"},
	{"POST", "/v1/sessions/ses_x:streamTicket"},
	{"POST", "/v1/credentials"},
	{"GET", "/v1/credentials"},
	{"DELETE", "/v1/credentials/c1"},
}

func preflight(t *testing.T, ctx context.Context, u, origin, method, headers string) *http.Response {
	t.Helper()
	resp := webReq(t, ctx, "OPTIONS", u, "", "", http.Header{
		"Origin": {origin}, "Access-Control-Request-Method": {method}, "Access-Control-Request-Headers": {headers}})
	resp.Body.Close()
	return resp
}

func TestCORS(t *testing.T) {
	const app = "http://app.example:3000"
	ts := start(t, webAuth+"http: {cors: {allowed_origins: ['"+app+"', 'HTTPS://Admin.Example:443']}}\n")
	ctx := testkit.Context(t)

	// Preflights need no token and are answered for every REST route.
	for _, r := range restRoutes {
		resp := preflight(t, ctx, ts.baseURL+r.path, app, r.method, "authorization,content-type,last-event-id")
		h := resp.Header
		if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != app {
			t.Fatalf("preflight %s %s = %d %v", r.method, r.path, resp.StatusCode, h)
		}
		if !strings.Contains(h.Get("Access-Control-Allow-Methods"), r.method) {
			t.Fatalf("preflight %s %s: Allow-Methods %q", r.method, r.path, h.Get("Access-Control-Allow-Methods"))
		}
		for _, want := range []string{"Authorization", "Content-Type", "Last-Event-ID", "Accept"} {
			if !strings.Contains(h.Get("Access-Control-Allow-Headers"), want) {
				t.Fatalf("Allow-Headers %q lacks %s", h.Get("Access-Control-Allow-Headers"), want)
			}
		}
		if h.Get("Access-Control-Max-Age") == "" || !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
			t.Fatalf("preflight headers %v", h)
		}
	}
	// The configured origin is normalised as browsers send it.
	if resp := preflight(t, ctx, ts.baseURL+"/v1/sessions", "https://admin.example", "POST", ""); resp.Header.Get("Access-Control-Allow-Origin") != "https://admin.example" {
		t.Fatalf("normalised origin: %d %v", resp.StatusCode, resp.Header)
	}

	// A disallowed origin gets no CORS header, preflight or not.
	for _, origin := range []string{"http://evil.example", "http://app.example:3001", "https://app.example:3000", "null"} {
		resp := preflight(t, ctx, ts.baseURL+"/v1/sessions", origin, "POST", "authorization")
		if resp.StatusCode != http.StatusForbidden || hasCORSHeader(resp.Header) {
			t.Fatalf("preflight from %s = %d %v", origin, resp.StatusCode, resp.Header)
		}
		resp = webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions", "", webTokenA, http.Header{"Origin": {origin}})
		resp.Body.Close()
		if resp.StatusCode != 200 || hasCORSHeader(resp.Header) {
			t.Fatalf("GET from %s = %d %v", origin, resp.StatusCode, resp.Header)
		}
	}

	// Actual requests from the allowed origin: JSON, errors and SSE.
	hdr := http.Header{"Origin": {app}}
	id := webJSON(t, ctx, "POST", ts.baseURL+"/v1/sessions", `{"model":"sim/echo"}`, webTokenA, hdr, 200)["id"].(string)
	resp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id, "", "", hdr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != app {
		t.Fatalf("401 from the allowed origin = %d %v", resp.StatusCode, resp.Header)
	}
	resp = webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"hi"}`, webTokenA,
		http.Header{"Origin": {app}, "Accept": {"text/event-stream"}})
	defer resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != app || resp.Header.Get("Content-Type") != "text/event-stream" ||
		resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("SSE headers %v", resp.Header)
	}
	newWebFrames(t, resp.Body).until("prompt_end")

	// No origins configured: no CORS at all.
	off := start(t, "")
	if resp := preflight(t, ctx, off.baseURL+"/v1/sessions", app, "POST", "content-type"); resp.StatusCode != http.StatusForbidden || hasCORSHeader(resp.Header) {
		t.Fatalf("preflight without CORS config = %d %v", resp.StatusCode, resp.Header)
	}
	resp = webReq(t, ctx, "GET", off.baseURL+"/v1/sessions", "", "", hdr)
	resp.Body.Close()
	if resp.StatusCode != 200 || hasCORSHeader(resp.Header) {
		t.Fatalf("GET without CORS config = %d %v", resp.StatusCode, resp.Header)
	}

	// "*" allows any origin.
	anyOrigin := start(t, "http: {cors: {allowed_origins: ['*']}}\n")
	if resp := preflight(t, ctx, anyOrigin.baseURL+"/v1/sessions", "http://x.example", "POST", "content-type"); resp.Header.Get("Access-Control-Allow-Origin") != "http://x.example" {
		t.Fatalf("preflight with * = %d %v", resp.StatusCode, resp.Header)
	}
}

func hasCORSHeader(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			return true
		}
	}
	return false
}

func TestHTTPConfig(t *testing.T) {
	t.Setenv("WEB_TEST_SHORT_KEY", "short")
	t.Setenv("WEB_TEST_KEY", strings.Repeat("k", 32))
	bad := map[string]string{
		"http: {cors: {allowed_origins: ['http://a.example/']}}":         "http.cors.allowed_origins[0]",
		"http: {cors: {allowed_origins: ['a.example']}}":                 "http.cors.allowed_origins[0]",
		"http: {cors: {allowed_origins: ['http://a.example/x']}}":        "http.cors.allowed_origins[0]",
		"http: {cors: {allowed_origins: ['http://a.example:99999']}}":    "http.cors.allowed_origins[0]",
		"http: {cors: {allowed_origins: ['http://a.example?x=1']}}":      "http.cors.allowed_origins[0]",
		"http: {cors: {allowed_origins: ['*', 'http://u@a.example']}}":   "http.cors.allowed_origins[1]",
		"http: {cors: {allowed_origins: ['']}}":                          "http.cors.allowed_origins[0]",
		"http: {cors: {allowed_origin: ['http://a.example']}}":           "allowed_origin",
		"http: {sse_heartbeat_ms: -1}":                                   "http.sse_heartbeat_ms",
		"http: {ticket_ttl_ms: -5}":                                      "http.ticket_ttl_ms",
		"http: {ticket_ttl_ms: 3600001}":                                 "http.ticket_ttl_ms",
		"http: {ticket_key_env: WEB_TEST_SHORT_KEY}":                     "http.ticket_key_env",
		"http: {ticket_key_env: WEB_TEST_UNSET_KEY_VARIABLE}":            "http.ticket_key_env",
		"http: {ticket_key: '0123456789012345678901234567890123456789'}": "ticket_key",
	}
	for y, want := range bad {
		_, err := config.Parse(strings.NewReader(y))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one naming %s", y, err, want)
		}
	}
	cfg, err := config.Parse(strings.NewReader("http: {cors: {allowed_origins: ['HTTP://LocalHost:8080', 'https://a.example:443', 'http://[::1]:5173', 'http://a.example:80']}, ticket_key_env: WEB_TEST_KEY}"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cfg.HTTP.CORS.AllowedOrigins, " ")
	if got != "http://localhost:8080 https://a.example http://[::1]:5173 http://a.example" {
		t.Fatalf("origins = %s", got)
	}
	if cfg.HTTP.TicketKey != strings.Repeat("k", 32) || cfg.HTTP.TicketTTLMs != 60000 || cfg.HTTP.SSEHeartbeatMs != 15000 {
		t.Fatalf("http = %+v", cfg.HTTP)
	}
	if d := config.Default(); len(d.HTTP.CORS.AllowedOrigins) != 0 || d.HTTP.SSEHeartbeatMs != 15000 {
		t.Fatalf("default http = %+v", d.HTTP)
	}
}

// webClock is a settable clock for ticket expiry.
type webClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *webClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *webClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func ticketFor(t *testing.T, ctx context.Context, base, id, token string) (string, time.Time) {
	t.Helper()
	out := webJSON(t, ctx, "POST", base+"/v1/sessions/"+id+":streamTicket", `{}`, token, nil, 200)
	exp, err := time.Parse(time.RFC3339Nano, out["expireTime"].(string))
	if err != nil {
		t.Fatal(err)
	}
	return out["ticket"].(string), exp
}

// wantStatus checks a response's status and its gRPC status JSON.
func wantStatus(t *testing.T, resp *http.Response, code int, grpcCode codes.Code, msg string) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// Before an SSE stream starts an error keeps its HTTP status; its body
	// is an error frame.
	if rest, ok := strings.CutPrefix(string(b), "event: error\ndata: "); ok {
		b = []byte(strings.TrimSpace(rest))
	}
	var st struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if resp.StatusCode != code || json.Unmarshal(b, &st) != nil || st.Code != int(grpcCode) || !strings.Contains(st.Message, msg) {
		t.Fatalf("%s %s = %d %s, want %d %v %q", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, b, code, grpcCode, msg)
	}
}

func TestStreamTickets(t *testing.T) {
	clock := &webClock{t: time.Now()}
	ts := start(t, webAuth, app.WithClock(clock.Now))
	ctx := testkit.Context(t)
	idA := webSession(t, ctx, ts.baseURL, webTokenA)
	idA2 := webSession(t, ctx, ts.baseURL, webTokenA)
	idB := webSession(t, ctx, ts.baseURL, webTokenB)
	webJSON(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+idA+":prompt", `{"text":"one two"}`, webTokenA, http.Header{"Accept": {"application/json"}}, 200)

	// Minting needs the token and the tenant's own session.
	wantStatus(t, webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+idA+":streamTicket", `{}`, "", nil), 401, codes.Unauthenticated, "bearer")
	wantStatus(t, webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+idB+":streamTicket", `{}`, webTokenA, nil), 404, codes.NotFound, "")
	ticket, exp := ticketFor(t, ctx, ts.baseURL, idA, webTokenA)
	if d := exp.Sub(clock.Now()); d != time.Minute {
		t.Fatalf("ticket lives %v, want 1m", d)
	}
	// Over gRPC too.
	gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+webTokenB)
	if tr, err := ts.agent.CreateStreamTicket(gctx, &agentdv1.CreateStreamTicketRequest{SessionId: idB}); err != nil || tr.GetTicket() == "" {
		t.Fatalf("gRPC CreateStreamTicket = %v, %v", tr, err)
	}

	// The ticket reads its session's events, with no token.
	events := func(id, ticket string, extra string) *http.Response {
		return webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/events?ticket="+url.QueryEscape(ticket)+extra, "", "", sseAccept)
	}
	resp := events(idA, ticket, "")
	frames := newWebFrames(t, resp.Body).until("prompt_end")
	resp.Body.Close()
	if resp.StatusCode != 200 || frames[0].id != "1" {
		t.Fatalf("events with a ticket = %d, first frame %+v", resp.StatusCode, frames[0])
	}
	// ... and resumes like any events request.
	resp = events(idA, ticket, "&afterSeq=2")
	if f := newWebFrames(t, resp.Body).until("prompt_end"); f[0].id != "3" {
		t.Fatalf("resume with a ticket starts at %s", f[0].id)
	}
	resp.Body.Close()

	// Wrong session (the same tenant's other session, or another tenant's).
	wantStatus(t, events(idA2, ticket, ""), 401, codes.Unauthenticated, "another session")
	wantStatus(t, events(idB, ticket, ""), 401, codes.Unauthenticated, "another session")

	// Any other route with a ticket: 401, even with a good token.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/" + idA, ""},
		{"GET", "/v1/sessions", ""},
		{"GET", "/v1/sessions/" + idA + "/messages", ""},
		{"POST", "/v1/sessions/" + idA + ":prompt", `{"text":"x"}`},
		{"POST", "/v1/sessions/" + idA + ":abort", `{}`},
		{"POST", "/v1/sessions/" + idA + ":streamTicket", `{}`},
		{"DELETE", "/v1/sessions/" + idA, ""},
		{"GET", "/v1/credentials", ""},
		{"POST", "/v1/sessions/" + idA + "/events", ""},
	} {
		for _, token := range []string{"", webTokenA} {
			wantStatus(t, webReq(t, ctx, r.method, ts.baseURL+r.path+"?ticket="+url.QueryEscape(ticket), r.body, token, nil),
				401, codes.Unauthenticated, "only on GET /v1/sessions/{session_id}/events")
		}
	}
	if _, err := ts.agent.GetSession(gctx, &agentdv1.GetSessionRequest{SessionId: idB}); err != nil {
		t.Fatalf("session B after the refused calls: %v", err)
	}

	// Tampered tickets.
	payload, sig, _ := strings.Cut(strings.TrimPrefix(ticket, "v1."), ".")
	otherTicket, _ := ticketFor(t, ctx, ts.baseURL, idA2, webTokenA)
	otherPayload, _, _ := strings.Cut(strings.TrimPrefix(otherTicket, "v1."), ".")
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for name, bad := range map[string]string{
		"flipped payload":   "v1." + flip(payload, 5) + "." + sig,
		"flipped signature": "v1." + payload + "." + flip(sig, 3),
		"swapped payload":   "v1." + otherPayload + "." + sig,
		"no signature":      "v1." + payload,
		"empty signature":   "v1." + payload + ".",
		"bad version":       "v2." + payload + "." + sig,
		"garbage":           "not-a-ticket",
		"empty":             "",
	} {
		wantStatus(t, events(idA, bad, ""), 401, codes.Unauthenticated, "invalid stream ticket")
		_ = name
	}
	// A repeated ticket parameter is refused.
	wantStatus(t, events(idA, ticket, "&ticket="+url.QueryEscape(ticket)), 401, codes.Unauthenticated, "invalid stream ticket")

	// Forged grants: a client cannot hand the gRPC layer a tenant itself.
	for _, h := range []string{"X-Agentd-Stream-Grant", "Grpc-Metadata-X-Agentd-Stream-Grant"} {
		resp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+idA+"/events", "", "", http.Header{
			"Accept": {"text/event-stream"}, h: {payload + "." + sig}})
		wantStatus(t, resp, 401, codes.Unauthenticated, "bearer")
	}
	for _, v := range []string{"garbage", payload + "." + sig, ticket} {
		fctx := metadata.AppendToOutgoingContext(ctx, "x-agentd-stream-grant", v)
		st, err := ts.agent.StreamEvents(fctx, &agentdv1.StreamEventsRequest{SessionId: idA})
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("forged grant %q: %v", v, err)
		}
	}

	// Expiry.
	clock.Advance(59 * time.Second)
	resp = events(idA, ticket, "&afterSeq=2")
	if resp.StatusCode != 200 {
		t.Fatalf("ticket at 59s = %d", resp.StatusCode)
	}
	resp.Body.Close()
	clock.Advance(time.Second)
	wantStatus(t, events(idA, ticket, ""), 401, codes.Unauthenticated, "expired")
	fresh, _ := ticketFor(t, ctx, ts.baseURL, idA, webTokenA)
	resp = events(idA, fresh, "&afterSeq=2")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("fresh ticket = %d", resp.StatusCode)
	}

	// Without auth.tokens tickets work the same (the local tenant).
	local := start(t, "http: {ticket_ttl_ms: 5000}\n")
	id := webSession(t, ctx, local.baseURL, "")
	lt, lexp := ticketFor(t, ctx, local.baseURL, id, "")
	if d := time.Until(lexp); d <= 0 || d > 5*time.Second {
		t.Fatalf("ticket_ttl_ms 5000: expires in %v", d)
	}
	wantStatus(t, webReq(t, ctx, "GET", local.baseURL+"/v1/sessions/"+id+"?ticket="+url.QueryEscape(lt), "", "", nil), 401, codes.Unauthenticated, "only on GET")
	wantStatus(t, webReq(t, ctx, "GET", local.baseURL+"/v1/sessions/"+id+"/events?ticket="+url.QueryEscape(ticket), "", "", sseAccept), 401, codes.Unauthenticated, "invalid stream ticket")
}

// A shared ticket key lets every replica accept every replica's tickets.
func TestStreamTicketSharedKey(t *testing.T) {
	t.Setenv("WEB_TEST_TICKET_KEY", "0123456789abcdef0123456789abcdef")
	shared := "http: {ticket_key_env: WEB_TEST_TICKET_KEY}\n"
	r1, r2, r3 := start(t, shared), start(t, shared), start(t, "")
	ctx := testkit.Context(t)
	// The same session id on each replica (as with a shared session store).
	id := webSession(t, ctx, r1.baseURL, "")
	ticket, _ := ticketFor(t, ctx, r1.baseURL, id, "")
	for _, r := range []*testServer{r2, r3} {
		resp := webReq(t, ctx, "GET", r.baseURL+"/v1/sessions/"+id+"/events?ticket="+url.QueryEscape(ticket), "", "", sseAccept)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case r == r2 && resp.StatusCode != http.StatusNotFound: // the ticket is good; the session lives on r1 only
			t.Fatalf("replica with the shared key = %d %s", resp.StatusCode, b)
		case r == r3 && resp.StatusCode != http.StatusUnauthorized:
			t.Fatalf("replica with its own key = %d %s", resp.StatusCode, b)
		}
	}
}

func TestPromptStartWithoutStreaming(t *testing.T) {
	ts := start(t, webAuth)
	ctx := testkit.Context(t)
	id := webSession(t, ctx, ts.baseURL, webTokenA)
	prompt := ts.baseURL + "/v1/sessions/" + id + ":prompt"
	jsonAccept := http.Header{"Accept": {"application/json"}}

	// A 30 s retry wait: the POST must come back long before the prompt ends.
	began := time.Now()
	out := webJSON(t, ctx, "POST", prompt, `{"text":"hello [[faults: 429:retry-after=30,ok]]"}`, webTokenA, jsonAccept, 200)
	if time.Since(began) > 10*time.Second || out["sessionId"] != id || !strings.HasPrefix(out["promptId"].(string), "prm_") || out["afterSeq"] != "0" {
		t.Fatalf("prompt start = %v after %v", out, time.Since(began))
	}
	promptID := out["promptId"].(string)

	// The page follows it with a ticket (an EventSource cannot send a token).
	ticket, _ := ticketFor(t, ctx, ts.baseURL, id, webTokenA)
	resp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/events?afterSeq=0&ticket="+url.QueryEscape(ticket), "", "", sseAccept)
	defer resp.Body.Close()
	fr := newWebFrames(t, resp.Body)
	got := fr.until("auto_retry_start")
	if got[0].event != "agent_start" || got[0].data["promptId"] != promptID {
		t.Fatalf("first event %+v", got[0])
	}

	// Busy: the same error as the streaming route, as gRPC status JSON.
	for _, h := range []http.Header{jsonAccept, {"Accept": {"application/json, text/plain, */*"}}, nil} {
		u := prompt
		if h == nil {
			u += "?stream=false"
		}
		wantStatus(t, webReq(t, ctx, "POST", u, `{"text":"again"}`, webTokenA, h), 400, codes.FailedPrecondition, "retry chain is in progress")
	}
	wantStatus(t, webReq(t, ctx, "POST", prompt, `{"text":"again"}`, "", jsonAccept), 401, codes.Unauthenticated, "bearer")
	wantStatus(t, webReq(t, ctx, "POST", prompt+"?stream=maybe", `{"text":"again"}`, webTokenA, nil), 400, codes.InvalidArgument, "stream")
	wantStatus(t, webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+missingSession+":prompt", `{"text":"x"}`, webTokenA, jsonAccept), 404, codes.NotFound, "")
	wantStatus(t, webReq(t, ctx, "POST", prompt, `{"text":`, webTokenA, jsonAccept), 400, codes.InvalidArgument, "")

	// Cancel the wait; the stream tells the end.
	webJSON(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+id+":abortRetry", `{}`, webTokenA, nil, 200)
	rest := fr.until("prompt_end")
	var end map[string]any
	for _, f := range rest {
		if f.event == "auto_retry_end" {
			end = f.data["autoRetryEnd"].(map[string]any)
		}
	}
	if end == nil || end["success"] != false || end["finalError"] != "Retry cancelled" {
		t.Fatalf("auto_retry_end = %v", end)
	}

	// ?stream=false wins over an SSE Accept; ?stream=true keeps streaming
	// even with Accept: application/json.
	out = webJSON(t, ctx, "POST", prompt+"?stream=false", `{"text":"two"}`, webTokenA, sseAccept, 200)
	if out["afterSeq"] == "0" || out["promptId"] == promptID {
		t.Fatalf("second start = %v", out)
	}
	newWebFrames(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/events?afterSeq="+out["afterSeq"].(string), "", webTokenA, sseAccept).Body).until("prompt_end")
	resp2 := webReq(t, ctx, "POST", prompt+"?stream=true", `{"text":"three"}`, webTokenA, jsonAccept)
	defer resp2.Body.Close()
	line, err := bufio.NewReader(resp2.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, `{"result":`) {
		t.Fatalf("?stream=true: %q %v", line, err)
	}
}

func TestSSEHeartbeat(t *testing.T) {
	ts := start(t, "http: {sse_heartbeat_ms: 40}\nproviders: [{name: sim, kind: simulated, token_delay_ms: 60}]\n")
	ctx := testkit.Context(t)
	id := webSession(t, ctx, ts.baseURL, "")

	// An idle stream: the ping sends the headers, then pings go on.
	resp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/events", "", "", sseAccept)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" ||
		resp.Header.Get("X-Accel-Buffering") != "no" || resp.Header.Get("Cache-Control") != "no-cache" || resp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("idle SSE = %d %v", resp.StatusCode, resp.Header)
	}
	fr := newWebFrames(t, resp.Body)
	for range 2 {
		if f, ok := fr.next(); !ok || f.comment != "ping" || f.event != "" {
			t.Fatalf("frame %+v, want a ping", f)
		}
	}
	// Events flow between pings (60 ms per word, 40 ms heartbeats), every
	// frame whole and in order.
	webJSON(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"a b c d e f"}`, "", http.Header{"Accept": {"application/json"}}, 200)
	pings, seq := 0, 0
	for {
		f, ok := fr.next()
		if !ok {
			t.Fatal("stream ended")
		}
		if f.comment == "ping" {
			pings++
			continue
		}
		seq++
		if f.id != strconv.Itoa(seq) || f.data["type"] != f.event {
			t.Fatalf("frame %+v, want seq %d", f, seq)
		}
		if f.event == "prompt_end" {
			break
		}
	}
	if pings == 0 {
		t.Fatal("no ping between the words")
	}

	// Errors before the stream keep their HTTP status.
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+missingSession+"/events", "", "", sseAccept), 404, codes.NotFound, "")
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/events?afterSeq=999", "", "", sseAccept), 400, codes.InvalidArgument, "")
	// JSON streams get no pings.
	nresp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/events?afterSeq=1", "", "", nil)
	defer nresp.Body.Close()
	if line, err := bufio.NewReader(nresp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, `{"result":`) {
		t.Fatalf("NDJSON: %q %v", line, err)
	}
}

// An EventSource reconnects to the URL it was opened with (afterSeq
// included), adding Last-Event-ID: the later seq wins.
func TestLastEventIDWinsOverAfterSeq(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	id := webSession(t, ctx, ts.baseURL, "")
	webJSON(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"one two three"}`, "", http.Header{"Accept": {"application/json"}}, 200)
	// The prompt runs on after that answer: wait for its end, so that every
	// seq the cases resume from exists.
	all := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/events", "", "", http.Header{"Accept": {"text/event-stream"}})
	newWebFrames(t, all.Body).until("prompt_end")
	all.Body.Close()
	ticket, _ := ticketFor(t, ctx, ts.baseURL, id, "")
	for _, c := range []struct {
		query, lastID, first string
	}{
		{"?afterSeq=2", "5", "6"},
		{"?after_seq=2", "5", "6"},
		{"?afterSeq=5", "2", "6"},
		{"?afterSeq=2&ticket=" + url.QueryEscape(ticket), "4", "5"},
		{"", "3", "4"},
	} {
		resp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+id+"/events"+c.query, "", "", http.Header{"Accept": {"text/event-stream"}, "Last-Event-ID": {c.lastID}})
		f := newWebFrames(t, resp.Body).until("prompt_end")
		resp.Body.Close()
		if f[0].id != c.first {
			t.Fatalf("%s with Last-Event-ID %s starts at %s, want %s", c.query, c.lastID, f[0].id, c.first)
		}
	}
}

func TestConsoleServed(t *testing.T) {
	ts := start(t, webAuth)
	ctx := testkit.Context(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(ts.baseURL + "/console")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("/console = %d %v", resp.StatusCode, resp.Header)
	}
	for path, ctype := range map[string]string{
		"/console/":          "text/html",
		"/console/app.js":    "text/javascript",
		"/console/api.js":    "text/javascript",
		"/console/style.css": "text/css",
	} {
		// No token needed: the page asks for one.
		resp := webReq(t, ctx, "GET", ts.baseURL+path, "", "", nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || len(b) == 0 {
			t.Fatalf("%s = %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Fatalf("%s headers %v", path, resp.Header)
		}
	}
	resp = webReq(t, ctx, "GET", ts.baseURL+"/console/nope.js", "", "", nil)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("missing file = %d", resp.StatusCode)
	}
}
