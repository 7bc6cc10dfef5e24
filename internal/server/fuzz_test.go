package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

// The REST fuzzers run one agentd per fuzz process (started before
// f.Fuzz, stopped by its cleanup) and send every input over one HTTP
// client. Run one with
//
//	go test -run '^$' -fuzz '^FuzzRESTBodies$' -fuzztime 10m ./internal/server/
//	go test -run '^$' -fuzz '^FuzzResumeHeaders$' -fuzztime 10m ./internal/server/
//
// The seeds below and testdata/fuzz/<FuzzName> run with every go test.

// fuzzRequestTimeout bounds one request of a fuzz input: every route they
// call answers at once.
const fuzzRequestTimeout = 10 * time.Second

// fuzzClient is an HTTP client of its own, its idle connections closed when
// the test ends (no goroutine left behind).
func fuzzClient(tb testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: fuzzRequestTimeout}
}

// restFuzz is what FuzzRESTBodies' inputs share: the server, the client, a
// session that takes prompts and a session that waits for a tool result.
type restFuzz struct {
	ts     *testServer
	client *http.Client

	plain           string // an idle session without tools ("" when used up)
	waiting, callID string // a session waiting for the result of callID ("" when used up)
}

// fuzzCallID in a fuzz input is replaced by the call the waiting session
// waits for, so that the fuzzer can reach a result that is accepted.
const fuzzCallID = "CALL_ID"

// do sends one request and returns the status and the body. Only a
// transport error (the server gone, a timeout) fails the input here.
func (fx *restFuzz) do(tb testing.TB, method, path string, body []byte, header http.Header) (int, []byte) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fuzzRequestTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, fx.ts.baseURL+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := fx.client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// checkAnswer holds for every answer: no 5xx other than 503, an error is the
// gateway's JSON error (a gRPC code and a message), a success is JSON.
func checkAnswer(tb testing.TB, what string, body []byte, code int, answer []byte) {
	tb.Helper()
	switch {
	case code >= 500 && code != http.StatusServiceUnavailable:
		tb.Fatalf("%s with body %q: %d %s", what, body, code, answer)
	case code >= 400:
		var e struct {
			Code    *int    `json:"code"`
			Message *string `json:"message"`
		}
		if err := json.Unmarshal(answer, &e); err != nil || e.Code == nil || e.Message == nil {
			tb.Fatalf("%s with body %q: %d %q is not the gateway's JSON error (%v)", what, body, code, answer, err)
		}
		if *e.Code <= 0 || *e.Code > 16 || strings.TrimSpace(*e.Message) == "" {
			tb.Fatalf("%s with body %q: %d %s: want a gRPC error code and a message", what, body, code, answer)
		}
	case code == http.StatusOK:
		if !json.Valid(answer) {
			tb.Fatalf("%s with body %q: 200 %q is not JSON", what, body, answer)
		}
	default:
		tb.Fatalf("%s with body %q: unexpected status %d %s", what, body, code, answer)
	}
}

// newSession creates a session and returns its id.
func (fx *restFuzz) newSession(tb testing.TB, body string) string {
	tb.Helper()
	code, b := fx.do(tb, "POST", "/v1/sessions", []byte(body), nil)
	var s struct {
		ID string `json:"id"`
	}
	if code != 200 || json.Unmarshal(b, &s) != nil || s.ID == "" {
		tb.Fatalf("POST /v1/sessions %s = %d %s", body, code, b)
	}
	return s.ID
}

func (fx *restFuzz) deleteSession(tb testing.TB, id string) {
	tb.Helper()
	if code, b := fx.do(tb, "DELETE", "/v1/sessions/"+id, nil, nil); code != 200 {
		tb.Fatalf("DELETE session %s = %d %s", id, code, b)
	}
}

// waitingSession returns a session waiting for a tool call's result, and
// the call.
func (fx *restFuzz) waitingSession(tb testing.TB) (string, string) {
	tb.Helper()
	if fx.waiting != "" {
		return fx.waiting, fx.callID
	}
	id := fx.newSession(tb, `{"model":"sim/echo","tools":[{"name":"get_weather","description":"Weather","inputSchema":{"type":"object"}}]}`)
	if code, b := fx.do(tb, "POST", "/v1/sessions/"+id+":prompt?stream=false", []byte(`{"text":"Paris? [[tools: get_weather]]"}`), nil); code != 200 {
		tb.Fatalf("prompt with a tool call = %d %s", code, b)
	}
	testkit.EventuallyErr(tb, "the session waits for a tool result", func() error {
		_, b := fx.do(tb, "GET", "/v1/sessions/"+id, nil, nil)
		var s struct {
			PendingToolCalls []struct {
				CallID string `json:"callId"`
			} `json:"pendingToolCalls"`
		}
		if json.Unmarshal(b, &s) == nil && len(s.PendingToolCalls) > 0 && s.PendingToolCalls[0].CallID != "" {
			fx.waiting, fx.callID = id, s.PendingToolCalls[0].CallID
			return nil
		}
		return fmt.Errorf("session %s: %s", id, b)
	})
	return fx.waiting, fx.callID
}

// FuzzRESTBodies sends the input as the JSON body of the REST calls that
// take one: POST /v1/sessions, …:prompt?stream=false, /v1/credentials and
// …:submitToolResults. No input may give a 5xx other than 503 or an error
// that is not the gateway's JSON error with a message, and the server
// stays healthy.
func FuzzRESTBodies(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`null`,
		`[]`,
		`{"model":"sim/echo"}`,
		`{"model":"sim/echo","role":"default","systemPrompt":"be brief"}`,
		`{"model":"sim/echo","retry":{"enabled":true,"maxRetries":3,"baseDelayMs":"100","maxDelayMs":"0","modelFallback":true,` +
			`"fallbackChains":{"default":{"models":["sim/echo","sim/backup"]}},"fallbackRevertPolicy":"never"}}`,
		`{"model":"sim/echo","retry":{"maxRetries":-1,"baseDelayMs":"-5"}}`,
		`{"model":"sim/echo","retry":{"maxRetries":2147483648}}`,
		`{"model":"sim/echo","tools":[{"name":"get_weather","description":"Weather","inputSchema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`,
		`{"model":"sim/echo","tools":[{"name":"x","inputSchema":{"type":"string"}}]}`,
		`{"model":"sim/echo","tools":[{"name":"","inputSchema":null}]}`,
		`{"model":"nope/x"}`,
		`{"model":"sim/echo","bogus":1}`,
		`{"model":5}`,
		`{"model":"sim/\u0000"}`,
		`{"model":"sim/echo"`,
		`{"text":"hello there world"}`,
		`{"text":"one two [[tokens: 3]]"}`,
		`{"text":"[[faults: 529,429:retry-after=2,ok]]"}`,
		`{"text":"[[faults: nope]]"}`,
		`{"text":"[[tools: get_weather]]"}`,
		`{"text":""}`,
		`{"text":5}`,
		`{"text":"hi","sessionId":"ses_aaaaaaaaaaaaaaaaaaaaaaaaaa"}`,
		`{"text":"\ud800"}`,
		`{"provider":"sim","secret":"sk-test","id":"fuzz-cred","bankedResets":1}`,
		`{"provider":"sim","secret":"sk-test"}`,
		`{"provider":"nope","secret":"x"}`,
		`{"provider":"sim","secret":"x","id":"bad id!"}`,
		`{"provider":"sim","secret":"x","bankedResets":-1}`,
		`{"results":[{"callId":"` + fuzzCallID + `","content":"sunny, 21°C","isError":false}]}`,
		`{"results":[{"callId":"` + fuzzCallID + `","content":"boom","isError":true}]}`,
		`{"results":[{"callId":"c"}]}`,
		`{"results":[]}`,
		`{"results":[{"callId":"` + fuzzCallID + `"},{"callId":"` + fuzzCallID + `"}]}`,
		`{"results":{"callId":"x"}}`,
		"\xff\xfe{}",
		`{"model":"sim/echo","model":"sim/backup"}`,
		`{"model":"sim/echo"} trailing`,
	} {
		f.Add([]byte(seed))
	}

	fx := &restFuzz{ts: start(f, ""), client: fuzzClient(f)}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 16<<10 {
			return // large bodies only repeat what small ones reach
		}

		code, b := fx.do(t, "POST", "/v1/sessions", body, nil)
		checkAnswer(t, "POST /v1/sessions", body, code, b)
		if code == 200 {
			var s struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(b, &s) != nil || s.ID == "" {
				t.Fatalf("POST /v1/sessions %q: 200 without a session id: %s", body, b)
			}
			fx.deleteSession(t, s.ID)
		}

		if fx.plain == "" {
			fx.plain = fx.newSession(t, `{"model":"sim/echo"}`)
		}
		code, b = fx.do(t, "POST", "/v1/sessions/"+fx.plain+":prompt?stream=false", body, nil)
		checkAnswer(t, "POST …:prompt?stream=false", body, code, b)
		if code == 200 {
			var started struct {
				SessionID string `json:"sessionId"`
				PromptID  string `json:"promptId"`
				AfterSeq  string `json:"afterSeq"`
			}
			if json.Unmarshal(b, &started) != nil || started.SessionID != fx.plain || started.PromptID == "" {
				t.Fatalf("prompt %q: 200 %s, want the session and the prompt", body, b)
			}
			if _, err := strconv.ParseUint(started.AfterSeq, 10, 64); err != nil {
				t.Fatalf("prompt %q: afterSeq %q", body, started.AfterSeq)
			}
			// The prompt goes on: the next input gets a fresh session.
			fx.deleteSession(t, fx.plain)
			fx.plain = ""
		}

		code, b = fx.do(t, "POST", "/v1/credentials", body, nil)
		checkAnswer(t, "POST /v1/credentials", body, code, b)
		if code == 200 {
			var c struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(b, &c) != nil || c.ID == "" {
				t.Fatalf("POST /v1/credentials %q: 200 without an id: %s", body, b)
			}
			if dc, db := fx.do(t, "DELETE", "/v1/credentials/"+url.PathEscape(c.ID), nil, nil); dc != 200 {
				t.Fatalf("DELETE credential %q = %d %s", c.ID, dc, db)
			}
		}

		id, call := fx.waitingSession(t)
		results := bytes.ReplaceAll(body, []byte(fuzzCallID), []byte(call))
		code, b = fx.do(t, "POST", "/v1/sessions/"+id+":submitToolResults", results, nil)
		checkAnswer(t, "POST …:submitToolResults", results, code, b)
		if code == 200 {
			// The run goes on with the result: the next input waits anew.
			fx.deleteSession(t, id)
			fx.waiting, fx.callID = "", ""
		}

		if code, b := fx.do(t, "GET", "/healthz", nil, nil); code != 200 || strings.TrimSpace(string(b)) != "ok" {
			t.Fatalf("after body %q: /healthz = %d %s", body, code, b)
		}
	})
}

// resumeFuzz is what FuzzResumeHeaders' inputs share: a session whose
// prompt has ended, and its last seq.
type resumeFuzz struct {
	restFuzz
	id   string
	last uint64
}

// FuzzResumeHeaders sends GET /v1/sessions/{id}/events as an EventSource's
// reconnection does, with the input as Last-Event-ID and, as the URL's
// afterSeq or after_seq, the second input (form%3 0: no such parameter),
// asking for an event stream (form/3%2 0: SSE, served natively) or for
// newline-delimited JSON (1: the gateway). A valid seq resumes right after
// it (the later of the two wins); anything else is INVALID_ARGUMENT naming
// Last-Event-ID or after_seq; nothing panics.
func FuzzResumeHeaders(f *testing.F) {
	for _, seed := range []struct {
		lastID, afterSeq string
		form             uint8
	}{
		{"", "", 0},
		{"3", "", 0},
		{" 3 ", "", 0},
		{"0", "", 0},
		{"00004", "", 0},
		{"x", "", 0},
		{"-1", "", 0},
		{"+3", "", 0},
		{"3.0", "", 0},
		{"0x3", "", 0},
		{"1e3", "", 0},
		{"18446744073709551615", "", 0},
		{"18446744073709551616", "", 0},
		{"999", "", 0},
		{"5", "2", 1},
		{"2", "5", 1},
		{"5", "2", 2},
		{"x", "2", 1},
		{"x", "0", 2},
		{"3", "x", 1},
		{"", "999", 1},
		{"", "", 1},
		{"4", "-1", 2},
		{"\u00a05\u00a0", "", 0},
		{"5\x85", "1", 1},
		{"٣", "", 0},
		{"9", "", 0},
		{"10", "", 0},
		{"", "", 3},
		{"3", "", 3},
		{"x", "", 3},
		{"5", "2", 4},
		{"x", "2", 4},
		{"9", "", 3},
		{"\u00a07", "", 3},
		{"2", "999", 5},
		{"", "x", 5},
	} {
		f.Add(seed.lastID, seed.afterSeq, seed.form)
	}

	fx := &resumeFuzz{restFuzz: restFuzz{ts: start(f, "http: {sse_heartbeat_ms: 50}\n"), client: fuzzClient(f)}}
	fx.id = fx.newSession(f, `{"model":"sim/echo"}`)
	if code, b := fx.do(f, "POST", "/v1/sessions/"+fx.id+":prompt?stream=false", []byte(`{"text":"one two three"}`), nil); code != 200 {
		f.Fatalf("prompt = %d %s", code, b)
	}
	// Wait for the prompt's end: every seq up to last exists from now on.
	testkit.EventuallyErr(f, "the prompt ended", func() error {
		_, b := fx.do(f, "GET", "/v1/sessions/"+fx.id, nil, nil)
		var s struct {
			Status  string `json:"status"`
			LastSeq string `json:"lastSeq"`
		}
		if json.Unmarshal(b, &s) == nil && s.Status == "idle" && s.LastSeq != "0" {
			fx.last, _ = strconv.ParseUint(s.LastSeq, 10, 64)
			return nil
		}
		return fmt.Errorf("the session: %s", b)
	})
	if fx.last < 4 {
		f.Fatalf("last seq %d: want a few events", fx.last)
	}

	f.Fuzz(func(t *testing.T, lastID, afterSeq string, form uint8) {
		if !validHeaderValue(lastID) {
			return // no HTTP client can send it
		}
		target := "/v1/sessions/" + fx.id + "/events"
		param := ""
		switch form % 3 {
		case 1:
			param = "afterSeq"
		case 2:
			param = "after_seq"
		}
		if param != "" {
			target += "?" + param + "=" + url.QueryEscape(afterSeq)
		}
		want := fx.expectResume(lastID, param != "", afterSeq)

		sse := form/3%2 == 0
		timeout := fuzzRequestTimeout
		if !sse && want.errs == nil && want.after == fx.last {
			// A JSON stream has no pings: nothing comes, not even the headers.
			timeout = 100 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", fx.ts.baseURL+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sse {
			req.Header.Set("Accept", "text/event-stream")
		}
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		what := "GET " + target + " with Last-Event-ID " + strconv.Quote(lastID)
		if !sse {
			what += ", JSON"
		}
		resp, err := fx.client.Do(req)
		if err != nil {
			if timeout < fuzzRequestTimeout && ctx.Err() != nil {
				return // nothing after the last seq
			}
			t.Fatalf("%s: %v", what, err)
		}
		defer resp.Body.Close()

		if want.errs != nil {
			b, _ := io.ReadAll(resp.Body)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			data, _ := strings.CutPrefix(string(b), "event: error\ndata: ")
			if !sse && bytes.HasPrefix(b, []byte(`{"error":`)) {
				var wrapped struct {
					Error json.RawMessage `json:"error"`
				}
				if json.Unmarshal(b, &wrapped) == nil {
					data = string(wrapped.Error)
				}
			}
			if resp.StatusCode != 400 || json.Unmarshal([]byte(strings.TrimSpace(data)), &e) != nil || e.Code != 3 || !namesOneOf(e.Message, want.errs) {
				t.Fatalf("%s = %d %q, want INVALID_ARGUMENT naming %s", what, resp.StatusCode, b, strings.Join(want.errs, " or "))
			}
			return
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s = %d %q, want the events after %d", what, resp.StatusCode, b, want.after)
		}
		// The first frame: the event after the resume point, or a ping when
		// there is none yet.
		var first string
		if sse {
			first = firstSSEFrame(t, what, resp.Body)
		} else {
			first = firstJSONEvent(t, what, resp.Body)
		}
		switch {
		case want.after == fx.last && first != "ping":
			t.Fatalf("%s: first %q, want nothing (no event after %d)", what, first, want.after)
		case want.after < fx.last && first != strconv.FormatUint(want.after+1, 10):
			t.Fatalf("%s: first event %q, want %d", what, first, want.after+1)
		}
	})
}

type resumeWant struct {
	after uint64   // the seq the stream resumes after
	errs  []string // or the fields one of which the INVALID_ARGUMENT names
}

// expectResume is what a reconnection with Last-Event-ID lastID (as sent;
// net/http trims it) and the URL's afterSeq (when hasParam) resumes from.
func (fx *resumeFuzz) expectResume(lastID string, hasParam bool, afterSeq string) resumeWant {
	var after uint64
	var errs []string
	if hasParam {
		v, err := strconv.ParseUint(afterSeq, 10, 64)
		if err != nil {
			errs = append(errs, "after_seq")
		}
		after = v
	}
	if id := strings.Trim(lastID, " \t"); id != "" {
		v, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if err != nil {
			errs = append(errs, "Last-Event-ID")
		}
		after = max(after, v)
	}
	if errs == nil && after > fx.last {
		errs = []string{"after_seq"}
	}
	return resumeWant{after: after, errs: errs}
}

// namesOneOf reports whether msg names one of fields.
func namesOneOf(msg string, fields []string) bool {
	for _, f := range fields {
		if strings.Contains(msg, f) {
			return true
		}
	}
	return false
}

// firstSSEFrame reads an SSE stream's first frame: an event's id, or "ping"
// for a heartbeat comment.
func firstSSEFrame(tb testing.TB, what string, body io.Reader) string {
	tb.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == ": ping":
			return "ping"
		case strings.HasPrefix(line, "id: "):
			return strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: error"):
			tb.Fatalf("%s: an error frame first", what)
		}
	}
	tb.Fatalf("%s: the stream ended before a frame (%v)", what, sc.Err())
	return ""
}

// firstJSONEvent reads the seq of a newline-delimited JSON stream's first
// event.
func firstJSONEvent(tb testing.TB, what string, body io.Reader) string {
	tb.Helper()
	line, err := bufio.NewReader(body).ReadBytes('\n')
	var chunk struct {
		Result *struct {
			Seq string `json:"seq"`
		} `json:"result"`
	}
	if jerr := json.Unmarshal(line, &chunk); jerr != nil || chunk.Result == nil {
		tb.Fatalf("%s: first line %q (%v, %v), want an event", what, line, err, jerr)
	}
	return chunk.Result.Seq
}

// validHeaderValue reports whether net/http sends v as a header value: no
// control characters other than tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
