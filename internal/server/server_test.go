package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/server"
	"github.com/agentd/agentd/internal/testkit"
)

// testTimeout bounds a test's waits (testkit.Timeout).
const testTimeout = testkit.Timeout

type testServer struct {
	app     *app.App
	srv     *server.Server
	conn    *grpc.ClientConn
	agent   agentdv1.AgentServiceClient
	creds   agentdv1.CredentialServiceClient
	baseURL string
}

// start runs agentd on loopback ports with the given YAML configuration
// (agentdtest.Start: the listen addresses are set to port 0).
func start(t testing.TB, yaml string, opts ...app.Option) *testServer {
	t.Helper()
	a := agentdtest.Start(t, yaml, agentdtest.WithApp(opts...))
	return &testServer{app: a.App, srv: a.Server, conn: a.Conn, agent: a.Agent,
		creds: a.Creds, baseURL: a.BaseURL}
}

// collect reads a prompt stream to its end.
func collect(t *testing.T, stream grpc.ServerStreamingClient[agentdv1.Event]) []*agentdv1.Event {
	t.Helper()
	var evs []*agentdv1.Event
	for {
		e, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatalf("Recv after %d events: %v", len(evs), err)
		}
		evs = append(evs, e)
	}
}

func types(evs []*agentdv1.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.GetType()
	}
	return out
}

// compact drops repeated message_update types, for readable comparisons.
func compact(ts []string) string {
	var out []string
	for _, t := range ts {
		if len(out) > 0 && t == "message_update" && out[len(out)-1] == "message_update" {
			continue
		}
		out = append(out, t)
	}
	return strings.Join(out, ",")
}

func checkSeq(t *testing.T, evs []*agentdv1.Event, first uint64) {
	t.Helper()
	for i, e := range evs {
		if want := first + uint64(i); e.GetSeq() != want {
			t.Fatalf("event %d (%s): seq = %d, want %d", i, e.GetType(), e.GetSeq(), want)
		}
	}
}

func TestGRPCCreatePromptHistory(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	sess, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.GetStatus() != "idle" || sess.GetModel() != "sim/echo" || sess.GetRole() != "default" || !sess.GetAutoRetryEnabled() {
		t.Fatalf("CreateSession = %v", sess)
	}
	stream, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hello there world"})
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, stream)
	checkSeq(t, evs, 1)
	if got, want := compact(types(evs)), "agent_start,message_start,message_update,message_end,agent_end,prompt_end"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	var text string
	for _, e := range evs {
		text += e.GetMessageUpdate().GetTextDelta()
		if e.GetSessionId() != sess.GetId() {
			t.Fatalf("event session_id = %q", e.GetSessionId())
		}
	}
	if text != "echo: hello there world" {
		t.Fatalf("streamed text = %q", text)
	}
	last := evs[len(evs)-1].GetPromptEnd()
	if last.GetOutcome() != "completed" {
		t.Fatalf("prompt_end = %v", last)
	}
	msgs, err := ts.agent.ListMessages(ctx, &agentdv1.ListMessagesRequest{SessionId: sess.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(msgs.GetMessages()); n != 2 {
		t.Fatalf("ListMessages: %d entries, want 2", n)
	}
	if m := msgs.GetMessages()[1]; m.GetRole() != "assistant" || m.GetContent()[0].GetText() != "echo: hello there world" || m.GetStopReason() != "stop" {
		t.Fatalf("assistant entry = %v", m)
	}
	got, err := ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: sess.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != "idle" || got.GetLastSeq() != evs[len(evs)-1].GetSeq() || got.GetMessageCount() != 2 {
		t.Fatalf("GetSession = %v", got)
	}

	// A second prompt continues the numbering; StreamEvents replays from a seq.
	evs2 := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "again"})))
	checkSeq(t, evs2, evs[len(evs)-1].GetSeq()+1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	es, err := ts.agent.StreamEvents(sctx, &agentdv1.StreamEventsRequest{SessionId: sess.GetId(), AfterSeq: 2})
	if err != nil {
		t.Fatal(err)
	}
	total := len(evs) + len(evs2)
	for want := uint64(3); want <= uint64(total); want++ {
		e, err := es.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e.GetSeq() != want {
			t.Fatalf("StreamEvents seq = %d, want %d", e.GetSeq(), want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// sseFrame is one parsed Server-Sent Event.
type sseFrame struct {
	id, event string
	data      map[string]any
}

// readSSE reads frames until stop returns true or the body ends
// (agentdtest.ReadFrames).
func readSSE(t *testing.T, body io.Reader, stop func(sseFrame) bool) []sseFrame {
	t.Helper()
	var frames []sseFrame
	agentdtest.ReadFrames(t, body, func(f agentdtest.Frame) bool {
		frames = append(frames, sseFrame{id: f.ID, event: f.Event, data: f.Data})
		return stop(frames[len(frames)-1])
	})
	return frames
}

func postJSON(t *testing.T, ctx context.Context, url, body string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func createREST(t *testing.T, ctx context.Context, base, body string, header http.Header) string {
	t.Helper()
	resp := postJSON(t, ctx, base+"/v1/sessions", body, header)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/sessions = %d %s", resp.StatusCode, b)
	}
	var sess struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &sess); err != nil || sess.ID == "" {
		t.Fatalf("session %s: %v", b, err)
	}
	return sess.ID
}

func TestRESTPromptSSEAndResume(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	id := createREST(t, ctx, ts.baseURL, `{"model":"sim/echo","systemPrompt":"be brief"}`, nil)

	resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"one two three"}`,
		http.Header{"Accept": {"text/event-stream"}})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	if resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("X-Accel-Buffering = %q", resp.Header.Get("X-Accel-Buffering"))
	}
	frames := readSSE(t, resp.Body, func(sseFrame) bool { return false })
	if len(frames) < 6 {
		t.Fatalf("got %d frames", len(frames))
	}
	for i, f := range frames {
		if f.id != strconv.Itoa(i+1) {
			t.Fatalf("frame %d id = %q", i, f.id)
		}
		if f.data["type"] != f.event {
			t.Fatalf("frame %d: event %q, data type %v", i, f.event, f.data["type"])
		}
		if f.data["seq"] != f.id {
			t.Fatalf("frame %d: data seq %v, id %s", i, f.data["seq"], f.id)
		}
	}
	last := frames[len(frames)-1]
	if last.event != "prompt_end" || last.data["promptEnd"].(map[string]any)["outcome"] != "completed" {
		t.Fatalf("last frame = %+v", last)
	}

	// Resume with Last-Event-ID: everything after 3, then live.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.baseURL+"/v1/sessions/"+id+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", "3")
	eresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer eresp.Body.Close()
	got := readSSE(t, eresp.Body, func(f sseFrame) bool { return f.id == last.id })
	if len(got) != len(frames)-3 || got[0].id != "4" {
		t.Fatalf("resume got %d frames from %q, want %d from 4", len(got), got[0].id, len(frames)-3)
	}

	// after_seq in the query works the same way, and without SSE the answer
	// is newline-delimited JSON.
	nreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.baseURL+"/v1/sessions/"+id+"/events?afterSeq="+strconv.Itoa(len(frames)-1), nil)
	nresp, err := http.DefaultClient.Do(nreq)
	if err != nil {
		t.Fatal(err)
	}
	defer nresp.Body.Close()
	line, err := bufio.NewReader(nresp.Body).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var chunk struct {
		Result struct {
			Seq  string `json:"seq"`
			Type string `json:"type"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(line), &chunk); err != nil || chunk.Result.Type != "prompt_end" || chunk.Result.Seq != last.id {
		t.Fatalf("NDJSON line %q: %v", line, err)
	}

	// History over REST.
	mresp, err := http.Get(ts.baseURL + "/v1/sessions/" + id + "/messages")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	var msgs struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(mresp.Body).Decode(&msgs); err != nil || len(msgs.Messages) != 2 || msgs.Messages[1].Content[0].Text != "echo: one two three" {
		t.Fatalf("messages = %+v, %v", msgs, err)
	}
}

func TestRESTErrorsMapToHTTPStatus(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
		wantMsg                  string
	}{
		{"empty model", "POST", "/v1/sessions", `{}`, 400, "model"},
		{"unknown provider", "POST", "/v1/sessions", `{"model":"nope/x"}`, 400, "unknown provider"},
		{"unknown field", "POST", "/v1/sessions", `{"model":"sim/echo","bogus":1}`, 400, "bogus"},
		{"unknown session", "GET", "/v1/sessions/ses_aaaaaaaaaaaaaaaaaaaaaaaaaa", "", 404, "not found"},
		{"malformed id", "GET", "/v1/sessions/xyz", "", 400, "session_id"},
		{"unknown session prompt", "POST", "/v1/sessions/ses_aaaaaaaaaaaaaaaaaaaaaaaaaa:prompt", `{"text":"hi"}`, 404, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, tc.method, ts.baseURL+tc.path, strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.wantMsg) {
				t.Fatalf("%s %s = %d %s, want %d containing %q", tc.method, tc.path, resp.StatusCode, b, tc.want, tc.wantMsg)
			}
		})
	}
}

func TestBadInputGRPC(t *testing.T) {
	ts := start(t, "sessions: {max_prompt_bytes: 64}\n")
	ctx := testkit.Context(t)
	sess, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	id := sess.GetId()
	neg := int32(-1)
	negMs := int64(-5)
	bad := "sometimes"
	for _, tc := range []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"empty model", func() error { _, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{}); return err }, codes.InvalidArgument, "model"},
		{"model without provider", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "echo"})
			return err
		}, codes.InvalidArgument, "model"},
		{"unknown provider", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "acme/x"})
			return err
		}, codes.InvalidArgument, "unknown provider"},
		{"unknown model", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/gpt-9"})
			return err
		}, codes.InvalidArgument, "no model"},
		{"bad role", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", Role: "Bad Role"})
			return err
		}, codes.InvalidArgument, "role"},
		{"negative max_retries", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", Retry: &agentdv1.RetrySettings{MaxRetries: &neg}})
			return err
		}, codes.InvalidArgument, "retry.max_retries"},
		{"negative base_delay_ms", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", Retry: &agentdv1.RetrySettings{BaseDelayMs: &negMs}})
			return err
		}, codes.InvalidArgument, "retry.base_delay_ms"},
		{"bad revert policy", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", Retry: &agentdv1.RetrySettings{FallbackRevertPolicy: &bad}})
			return err
		}, codes.InvalidArgument, "fallback_revert_policy"},
		{"chain with unknown provider", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", Retry: &agentdv1.RetrySettings{
				FallbackChains: map[string]*agentdv1.ModelChain{"default": {Models: []string{"acme/x"}}}}})
			return err
		}, codes.InvalidArgument, "retry.fallback_chains.default[0]"},
		{"bad tool name", func() error {
			_, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo", Tools: []*agentdv1.Tool{{Name: "has space"}}})
			return err
		}, codes.InvalidArgument, "tools[0].name"},
		{"empty prompt", func() error { return promptErr(ctx, ts, id, "  ") }, codes.InvalidArgument, "text"},
		{"prompt too large", func() error { return promptErr(ctx, ts, id, strings.Repeat("x", 65)) }, codes.InvalidArgument, "text"},
		{"bad fault script", func() error { return promptErr(ctx, ts, id, "hi [[faults: 529,bogus]]") }, codes.InvalidArgument, "faults step 2"},
		{"malformed session id", func() error { return promptErr(ctx, ts, "../etc", "hi") }, codes.InvalidArgument, "session_id"},
		{"empty session id", func() error {
			_, err := ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{})
			return err
		}, codes.InvalidArgument, "session_id"},
		{"unknown session", func() error { return promptErr(ctx, ts, "ses_aaaaaaaaaaaaaaaaaaaaaaaaaa", "hi") }, codes.NotFound, "not found"},
		{"unknown session abort", func() error {
			_, err := ts.agent.AbortRetry(ctx, &agentdv1.AbortRetryRequest{SessionId: "ses_aaaaaaaaaaaaaaaaaaaaaaaaaa"})
			return err
		}, codes.NotFound, "not found"},
		{"negative page size", func() error {
			_, err := ts.agent.ListSessions(ctx, &agentdv1.ListSessionsRequest{PageSize: -1})
			return err
		}, codes.InvalidArgument, "page_size"},
		{"bad page token", func() error {
			_, err := ts.agent.ListSessions(ctx, &agentdv1.ListSessionsRequest{PageToken: "garbage"})
			return err
		}, codes.InvalidArgument, "page_token"},
		{"after_seq beyond the log", func() error {
			s, err := ts.agent.StreamEvents(ctx, &agentdv1.StreamEventsRequest{SessionId: id, AfterSeq: 99})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, codes.InvalidArgument, "after_seq"},
		{"tool results while not waiting", func() error {
			_, err := ts.agent.SubmitToolResults(ctx, &agentdv1.SubmitToolResultsRequest{SessionId: id, Results: []*agentdv1.ToolResult{{CallId: "c1"}}})
			return err
		}, codes.FailedPrecondition, "not waiting"},
		{"credential for unknown provider", func() error {
			_, err := ts.creds.CreateCredential(ctx, &agentdv1.CreateCredentialRequest{Provider: "acme", Secret: "k"})
			return err
		}, codes.InvalidArgument, "provider"},
		{"credential without secret", func() error {
			_, err := ts.creds.CreateCredential(ctx, &agentdv1.CreateCredentialRequest{Provider: "sim"})
			return err
		}, codes.InvalidArgument, "secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.field) {
				t.Fatalf("error = %v (%s), want %s naming %q", st.Message(), st.Code(), tc.code, tc.field)
			}
		})
	}
	// Nothing about the session changed.
	got, err := ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetMessageCount() != 0 || got.GetLastSeq() != 0 || got.GetStatus() != "idle" {
		t.Fatalf("session changed by rejected requests: %v", got)
	}
	list, err := ts.agent.ListSessions(ctx, &agentdv1.ListSessionsRequest{})
	if err != nil || len(list.GetSessions()) != 1 {
		t.Fatalf("ListSessions = %v, %v; want the one session", list, err)
	}
}

func promptErr(ctx context.Context, ts *testServer, id, text string) error {
	s, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Text: text})
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

func TestBusyAbortDelete(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"}))
	stream := must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "wait [[faults: hang]]"}))
	// Wait until the model call is in flight.
	for {
		e, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e.GetType() == "message_start" {
			break
		}
	}
	if err := promptErr(ctx, ts, sess.GetId(), "second"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second prompt: %v, want FailedPrecondition", err)
	}
	got := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: sess.GetId()}))
	if got.GetStatus() != "streaming" {
		t.Fatalf("status = %q, want streaming", got.GetStatus())
	}
	// AbortRetry on a session that is not retrying is a successful no-op.
	if _, err := ts.agent.AbortRetry(ctx, &agentdv1.AbortRetryRequest{SessionId: sess.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.agent.Abort(ctx, &agentdv1.AbortRequest{SessionId: sess.GetId()}); err != nil {
		t.Fatal(err)
	}
	rest := collect(t, stream)
	end := rest[len(rest)-1]
	if end.GetType() != "prompt_end" || end.GetPromptEnd().GetOutcome() != "aborted" {
		t.Fatalf("after abort: %s", compact(types(rest)))
	}
	if me := rest[0].GetMessageEnd(); rest[0].GetType() != "message_end" || me.GetStopReason() != "aborted" {
		t.Fatalf("first event after abort = %v", rest[0])
	}
	// Abort returned after the prompt ended: a new prompt runs at once.
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "next"})))
	if evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("next prompt: %s", compact(types(evs)))
	}

	// Delete aborts a running prompt, then removes the session.
	stream = must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "[[faults: hang]]"}))
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.agent.DeleteSession(ctx, &agentdv1.DeleteSessionRequest{SessionId: sess.GetId()}); err != nil {
		t.Fatal(err)
	}
	rest = collect(t, stream)
	if end := rest[len(rest)-1]; end.GetPromptEnd().GetOutcome() != "aborted" || end.GetPromptEnd().GetError() != "session deleted" {
		t.Fatalf("prompt after delete: %v", end)
	}
	if _, err := ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: sess.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetSession after delete: %v", err)
	}
}

func TestTenantIsolation(t *testing.T) {
	ts := start(t, `auth:
  tokens:
    - {token: "token-of-team-a-0123456789", tenant: team-a}
    - {token: "token-of-team-b-0123456789", tenant: team-b}
`)
	ctx := testkit.Context(t)
	asA := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer token-of-team-a-0123456789")
	asB := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer token-of-team-b-0123456789")

	if _, err := ts.agent.ListSessions(ctx, &agentdv1.ListSessionsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	bad := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong-token-0123456789")
	if _, err := ts.agent.ListSessions(bad, &agentdv1.ListSessionsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	sess, err := ts.agent.CreateSession(asA, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	if sess.GetTenant() != "team-a" {
		t.Fatalf("tenant = %q", sess.GetTenant())
	}
	if _, err := ts.agent.GetSession(asB, &agentdv1.GetSessionRequest{SessionId: sess.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("B reads A's session: %v", err)
	}
	if err := promptErr(asB, ts, sess.GetId(), "hi"); status.Code(err) != codes.NotFound {
		t.Fatalf("B prompts A's session: %v", err)
	}
	if _, err := ts.agent.DeleteSession(asB, &agentdv1.DeleteSessionRequest{SessionId: sess.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("B deletes A's session: %v", err)
	}
	if l := must(ts.agent.ListSessions(asB, &agentdv1.ListSessionsRequest{})); len(l.GetSessions()) != 0 {
		t.Fatalf("B lists %d sessions", len(l.GetSessions()))
	}
	if l := must(ts.agent.ListSessions(asA, &agentdv1.ListSessionsRequest{})); len(l.GetSessions()) != 1 {
		t.Fatalf("A lists %d sessions", len(l.GetSessions()))
	}
	// Health checking needs no token.
	if _, err := healthpb.NewHealthClient(ts.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health: %v", err)
	}
	// REST: 401 without a token, the session with one.
	resp, err := http.Get(ts.baseURL + "/v1/sessions/" + sess.GetId())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("REST without token = %d", resp.StatusCode)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.baseURL+"/v1/sessions/"+sess.GetId(), nil)
	req.Header.Set("Authorization", "Bearer token-of-team-a-0123456789")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("REST with token = %d", resp.StatusCode)
	}
}

func TestManySessionsPromptAtOnce(t *testing.T) {
	ts := start(t, "providers: [{name: sim, kind: simulated, token_delay_ms: 1}]\n")
	ctx := testkit.Context(t)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			sess, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
			if err != nil {
				errs <- err
				return
			}
			want := fmt.Sprintf("echo: session %d says hi", i)
			stream, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: fmt.Sprintf("session %d says hi", i)})
			if err != nil {
				errs <- err
				return
			}
			var text string
			var seq uint64
			for {
				e, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					errs <- err
					return
				}
				if e.GetSeq() != seq+1 {
					errs <- fmt.Errorf("session %d: seq %d after %d", i, e.GetSeq(), seq)
					return
				}
				seq = e.GetSeq()
				text += e.GetMessageUpdate().GetTextDelta()
			}
			if text != want {
				errs <- fmt.Errorf("session %d: text %q", i, text)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c := ts.srv.Sessions().Count(); c != n {
		t.Fatalf("sessions = %d, want %d", c, n)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	ts := start(t, "")
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "agentd_sessions_active"} {
		resp, err := http.Get(ts.baseURL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Fatalf("GET %s = %d %q", path, resp.StatusCode, b)
		}
	}
}

func TestStopEndsStreamsWithFinalEvent(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"}))
	stream := must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "[[faults: hang]]"}))
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	follow := must(ts.agent.StreamEvents(ctx, &agentdv1.StreamEventsRequest{SessionId: sess.GetId()}))
	if _, err := follow.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := ts.app.Stop(testkit.ContextFor(t, testkit.StopTimeout)); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	rest := collect(t, stream)
	if end := rest[len(rest)-1].GetPromptEnd(); end.GetOutcome() != "aborted" || end.GetError() != "server shutting down" {
		t.Fatalf("prompt stream ended with %v", rest[len(rest)-1])
	}
	fr := collect(t, follow)
	if fr[len(fr)-1].GetType() != "prompt_end" {
		t.Fatalf("event stream ended with %v", fr[len(fr)-1])
	}
}

func TestRESTRetryChainOverSSE(t *testing.T) {
	ts := start(t, "retry: {base_delay_ms: 20}\n")
	ctx := testkit.Context(t)
	id := createREST(t, ctx, ts.baseURL, `{"model":"sim/echo"}`, nil)
	resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"hi [[faults: 529,503,ok]]"}`,
		http.Header{"Accept": {"text/event-stream"}})
	defer resp.Body.Close()
	frames := readSSE(t, resp.Body, func(sseFrame) bool { return false })

	var retries []sseFrame
	var ends []sseFrame
	for _, f := range frames {
		switch f.event {
		case "auto_retry_start":
			retries = append(retries, f)
		case "auto_retry_end":
			ends = append(ends, f)
		}
	}
	if len(retries) != 2 || len(ends) != 1 {
		t.Fatalf("got %d auto_retry_start and %d auto_retry_end", len(retries), len(ends))
	}
	for i, f := range retries {
		p := f.data["autoRetryStart"].(map[string]any)
		delay, _ := strconv.Atoi(p["delayMs"].(string))
		nominal := 20 << i
		if p["attempt"] != float64(i+1) || delay < nominal*3/4 || delay > nominal {
			t.Fatalf("auto_retry_start %d = %v; want attempt %d, delay in [%d, %d]", i, p, i+1, nominal*3/4, nominal)
		}
		// The continuation starts no earlier than the announced delay.
		seq, _ := strconv.Atoi(f.id)
		next := frames[seq] // frames are 1-based by seq; this is the frame after
		if next.event != "agent_start" {
			t.Fatalf("after auto_retry_start: %s", next.event)
		}
		t0, _ := time.Parse(time.RFC3339Nano, f.data["time"].(string))
		t1, _ := time.Parse(time.RFC3339Nano, next.data["time"].(string))
		if gap := t1.Sub(t0); gap < time.Duration(delay)*time.Millisecond {
			t.Fatalf("retry %d continued after %v, before its %dms delay", i+1, gap, delay)
		}
	}
	end := ends[0].data["autoRetryEnd"].(map[string]any)
	if end["success"] != true || end["attempt"] != float64(2) {
		t.Fatalf("auto_retry_end = %v", end)
	}
	if last := frames[len(frames)-1]; last.event != "prompt_end" || last.data["promptEnd"].(map[string]any)["outcome"] != "completed" {
		t.Fatalf("last frame = %v", last)
	}
}

func TestRetryControlsOverGRPC(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"}))
	id := sess.GetId()
	stream := must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Text: "[[faults: 429:retry-after=60,ok]]"}))
	for {
		e, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if st := e.GetAutoRetryStart(); st != nil {
			if st.GetDelayMs() != 60000 || st.GetDelaySource() != "provider" || st.GetAttempt() != 1 {
				t.Fatalf("auto_retry_start = %v", st)
			}
			break
		}
	}
	got := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id}))
	if !got.GetIsRetrying() || got.GetRetryAttempt() != 1 || got.GetStatus() != "retrying" {
		t.Fatalf("GetSession during backoff = status %q retrying %v attempt %d", got.GetStatus(), got.GetIsRetrying(), got.GetRetryAttempt())
	}
	if err := promptErr(ctx, ts, id, "meanwhile"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("prompt during backoff: %v", err)
	}
	if _, err := ts.agent.AbortRetry(ctx, &agentdv1.AbortRetryRequest{SessionId: id}); err != nil {
		t.Fatal(err)
	}
	rest := collect(t, stream)
	if got := compact(types(rest)); got != "auto_retry_end,prompt_end" {
		t.Fatalf("after AbortRetry: %s", got)
	}
	if e := rest[0].GetAutoRetryEnd(); e.GetSuccess() || e.GetFinalError() != "Retry cancelled" || e.GetAttempt() != 1 {
		t.Fatalf("auto_retry_end = %v", e)
	}
	if pe := rest[1].GetPromptEnd(); pe.GetOutcome() != "aborted" {
		t.Fatalf("prompt_end = %v", pe)
	}

	// SetAutoRetry(false): the next failure is final, with no retry events.
	if r, err := ts.agent.SetAutoRetry(ctx, &agentdv1.SetAutoRetryRequest{SessionId: id, Enabled: false}); err != nil || r.GetEnabled() {
		t.Fatalf("SetAutoRetry = %v, %v", r, err)
	}
	if got := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id})); got.GetAutoRetryEnabled() || got.GetRetry().GetEnabled() {
		t.Fatalf("auto_retry_enabled still true: %v", got)
	}
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: id, Text: "[[faults: 529,ok]]"})))
	if got := compact(types(evs)); got != "agent_start,message_start,message_end,agent_end,prompt_end" {
		t.Fatalf("with retry disabled: %s", got)
	}
	if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "failed" || pe.GetError() != "529 overloaded_error: Overloaded" {
		t.Fatalf("prompt_end = %v", pe)
	}
	// The history keeps every error entry.
	msgs := must(ts.agent.ListMessages(ctx, &agentdv1.ListMessagesRequest{SessionId: id}))
	var errorsSeen int
	for _, m := range msgs.GetMessages() {
		if m.GetStopReason() == "error" {
			errorsSeen++
		}
	}
	if errorsSeen != 2 {
		t.Fatalf("history has %d error entries, want 2", errorsSeen)
	}
}

func TestRESTFallbackAndRevert(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ts := start(t, "retry: {fallback_chains: {default: [sim/backup]}}\n", app.WithClock(clock.Now))
	ctx := testkit.Context(t)
	id := createREST(t, ctx, ts.baseURL, `{"model":"sim/echo"}`, nil)
	sse := func(text string) []sseFrame {
		resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"`+text+`"}`, http.Header{"Accept": {"text/event-stream"}})
		defer resp.Body.Close()
		return readSSE(t, resp.Body, func(sseFrame) bool { return false })
	}
	find := func(frames []sseFrame, event string) []map[string]any {
		var out []map[string]any
		for _, f := range frames {
			if f.event == event {
				out = append(out, f.data)
			}
		}
		return out
	}
	model := func() string {
		return must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id})).GetModel()
	}

	// The primary keeps failing with 529: the fallback model answers at once.
	frames := sse("hi [[faults: 529,ok]]")
	fa := find(frames, "retry_fallback_applied")
	if len(fa) != 1 || fa[0]["retryFallbackApplied"].(map[string]any)["to"] != "sim/backup" {
		t.Fatalf("retry_fallback_applied = %v", fa)
	}
	fs := find(frames, "retry_fallback_succeeded")
	if len(fs) != 1 || fs[0]["retryFallbackSucceeded"].(map[string]any)["model"] != "sim/backup" {
		t.Fatalf("retry_fallback_succeeded = %v", fs)
	}
	if m := model(); m != "sim/backup" {
		t.Fatalf("model after fallback = %s", m)
	}
	// During the cooldown the session stays on the fallback.
	sse("during the cooldown")
	if m := model(); m != "sim/backup" {
		t.Fatalf("model during cooldown = %s", m)
	}
	// After it, the next prompt goes back to the primary.
	clock.Advance(2 * time.Minute)
	frames = sse("after the cooldown")
	mc := find(frames, "model_change")
	if len(mc) != 1 || mc[0]["modelChange"].(map[string]any)["reason"] != "revert" || mc[0]["modelChange"].(map[string]any)["to"] != "sim/echo" {
		t.Fatalf("model_change = %v", mc)
	}
	if ms := find(frames, "message_start"); ms[0]["messageStart"].(map[string]any)["model"] != "sim/echo" {
		t.Fatalf("reverted prompt answered by %v", ms[0])
	}
	if m := model(); m != "sim/echo" {
		t.Fatalf("model after revert = %s", m)
	}
}

func TestToolLoopOverGRPC(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	schema, _ := structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}})
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo",
		Tools: []*agentdv1.Tool{{Name: "lookup", Description: "looks things up", InputSchema: schema}}}))
	if len(sess.GetTools()) != 1 || sess.GetTools()[0].GetInputSchema().GetFields()["type"].GetStringValue() != "object" {
		t.Fatalf("tools = %v", sess.GetTools())
	}
	stream := must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "find it [[tools: lookup]]"}))
	var evs []*agentdv1.Event
	for {
		e, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
		if tc := e.GetToolCall(); tc != nil {
			if tc.GetInput().GetStructValue().GetFields()["text"].GetStringValue() != "find it" {
				t.Fatalf("tool_call input = %v", tc.GetInput())
			}
			got := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: sess.GetId()}))
			if len(got.GetPendingToolCalls()) != 1 || got.GetPendingToolCalls()[0].GetCallId() != tc.GetCallId() {
				t.Fatalf("pending_tool_calls = %v", got.GetPendingToolCalls())
			}
			if _, err := ts.agent.SubmitToolResults(ctx, &agentdv1.SubmitToolResultsRequest{SessionId: sess.GetId(),
				Results: []*agentdv1.ToolResult{{CallId: "bogus", Content: "x"}}}); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("unknown call id: %v", err)
			}
			if _, err := ts.agent.SubmitToolResults(ctx, &agentdv1.SubmitToolResultsRequest{SessionId: sess.GetId(),
				Results: []*agentdv1.ToolResult{{CallId: tc.GetCallId(), Content: "found"}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := compact(types(evs)); got != "agent_start,message_start,message_update,message_end,tool_call,message_start,message_update,message_end,agent_end,prompt_end" {
		t.Fatalf("events = %s", got)
	}
	var answer string
	for _, e := range evs {
		if me := e.GetMessageEnd(); me != nil {
			answer = me.GetText()
		}
	}
	if answer != "echo: find it (tools: lookup=found)" {
		t.Fatalf("answer = %q", answer)
	}
	msgs := must(ts.agent.ListMessages(ctx, &agentdv1.ListMessagesRequest{SessionId: sess.GetId()})).GetMessages()
	if len(msgs) != 4 || msgs[1].GetContent()[0].GetType() != "tool_call" || msgs[2].GetRole() != "tool" || msgs[2].GetContent()[0].GetText() != "found" {
		t.Fatalf("history = %v", msgs)
	}
}

func TestToolLoopOverREST(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	// A bad schema is refused at creation.
	resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions", `{"model":"sim/echo","tools":[{"name":"x","inputSchema":{"type":"string"}}]}`, nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "tools[0].input_schema") {
		t.Fatalf("bad schema = %d %s", resp.StatusCode, b)
	}
	id := createREST(t, ctx, ts.baseURL, `{"model":"sim/echo","tools":[{"name":"get_weather","description":"Weather","inputSchema":{"type":"object"}}]}`, nil)
	resp = postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"Paris? [[tools: get_weather]]"}`, http.Header{"Accept": {"text/event-stream"}})
	defer resp.Body.Close()
	frames := readSSE(t, resp.Body, func(f sseFrame) bool {
		if f.event == "tool_call" {
			callID := f.data["toolCall"].(map[string]any)["callId"].(string)
			r := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":submitToolResults",
				`{"results":[{"callId":"`+callID+`","content":"sunny, 21°C","isError":false}]}`, nil)
			rb, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != 200 {
				t.Errorf("submitToolResults = %d %s", r.StatusCode, rb)
			}
		}
		return false
	})
	last := frames[len(frames)-1]
	if last.event != "prompt_end" || last.data["promptEnd"].(map[string]any)["outcome"] != "completed" {
		t.Fatalf("last frame = %v", last)
	}
	var answer string
	for _, f := range frames {
		if f.event == "message_end" {
			answer = f.data["messageEnd"].(map[string]any)["text"].(string)
		}
	}
	if answer != "echo: Paris? (tools: get_weather=sunny, 21°C)" {
		t.Fatalf("answer = %q", answer)
	}
	// Results for a session that waits for none: 400 (FAILED_PRECONDITION).
	r := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":submitToolResults", `{"results":[{"callId":"c"}]}`, nil)
	r.Body.Close()
	if r.StatusCode != 400 {
		t.Fatalf("results while not waiting = %d", r.StatusCode)
	}
}

func TestMetricsAfterRetryChain(t *testing.T) {
	ts := start(t, "retry: {base_delay_ms: 10}\n")
	ctx := testkit.Context(t)
	sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"}))
	evs := collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "[[faults: 529,503,ok]]"})))
	if evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("prompt: %s", compact(types(evs)))
	}
	collect(t, must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "[[faults: 400]]"})))

	resp, err := http.Get(ts.baseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		metrics[line[:i]] = line[i+1:]
	}
	for series, want := range map[string]string{
		`agentd_retry_attempts_total{class="transient",model="sim/echo",provider="sim"}`:   "2",
		`agentd_retry_attempts_total{class="usage_limit",model="sim/echo",provider="sim"}`: "0",
		`agentd_retry_chains_ended_total{outcome="success"}`:                               "1",
		`agentd_retry_chains_ended_total{outcome="max_retries"}`:                           "0",
		`agentd_retry_backoff_seconds_count{class="transient",source="estimate"}`:          "2",
		`agentd_sessions_in_backoff`:                                                       "0",
		`agentd_provider_errors_total{class="transient",provider="sim",status="529"}`:      "1",
		`agentd_provider_errors_total{class="transient",provider="sim",status="503"}`:      "1",
		`agentd_provider_errors_total{class="not_retryable",provider="sim",status="400"}`:  "1",
		`agentd_prompts_total{outcome="completed"}`:                                        "1",
		`agentd_prompts_total{outcome="failed"}`:                                           "1",
		`agentd_prompt_duration_seconds_count{outcome="completed"}`:                        "1",
		`agentd_provider_request_duration_seconds_count{provider="sim"}`:                   "4",
		`agentd_sessions_active`:                                                           "1",
		`agentd_model_fallbacks_applied_total{role="default"}`:                             "0",
		`agentd_credentials_blocked{provider="sim"}`:                                       "0",
		`agentd_store_degraded`:                                                            "0",
		`agentd_store_replicas_short`:                                                      "0",
		`grpc_server_handled_total{grpc_code="OK",grpc_method="CreateSession",grpc_service="agentd.v1.AgentService",grpc_type="unary"}`: "1",
	} {
		if got, ok := metrics[series]; !ok || got != want {
			t.Errorf("%s = %q (present %v), want %s", series, got, ok, want)
		}
	}
	// No label carries a session or prompt id.
	for series := range metrics {
		if strings.Contains(series, "ses_") || strings.Contains(series, "prm_") {
			t.Errorf("unbounded label value in %s", series)
		}
	}
}

// A session created while the primary cools down (another session's 529)
// starts on the fallback (model_change, reason cooldown) and goes back to
// the primary once the cooldown has expired.
func TestRESTNewSessionStartsOffACoolingModel(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	ts := start(t, "retry: {fallback_chains: {default: [sim/backup]}}\n", app.WithClock(clock.Now))
	ctx := testkit.Context(t)
	sse := func(id, text string) []sseFrame {
		resp := postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"`+text+`"}`, http.Header{"Accept": {"text/event-stream"}})
		defer resp.Body.Close()
		return readSSE(t, resp.Body, func(sseFrame) bool { return false })
	}
	find := func(frames []sseFrame, event, field string) []map[string]any {
		var out []map[string]any
		for _, f := range frames {
			if f.event == event {
				out = append(out, f.data[field].(map[string]any))
			}
		}
		return out
	}
	first := createREST(t, ctx, ts.baseURL, `{"model":"sim/echo"}`, nil)
	if fa := find(sse(first, "hi [[faults: 529,ok]]"), "retry_fallback_applied", "retryFallbackApplied"); len(fa) != 1 {
		t.Fatalf("retry_fallback_applied = %v", fa)
	}

	id := createREST(t, ctx, ts.baseURL, `{"model":"sim/echo"}`, nil)
	frames := sse(id, "hello")
	if mc := find(frames, "model_change", "modelChange"); len(mc) != 1 || mc[0]["reason"] != "cooldown" || mc[0]["from"] != "sim/echo" || mc[0]["to"] != "sim/backup" {
		t.Fatalf("model_change = %v", mc)
	}
	if ms := find(frames, "message_start", "messageStart"); len(ms) != 1 || ms[0]["model"] != "sim/backup" {
		t.Fatalf("message_start = %v", ms)
	}
	if m := must(ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: id})).GetModel(); m != "sim/backup" {
		t.Fatalf("model = %s", m)
	}
	clock.Advance(2 * time.Minute)
	frames = sse(id, "after the cooldown")
	if mc := find(frames, "model_change", "modelChange"); len(mc) != 1 || mc[0]["reason"] != "revert" || mc[0]["to"] != "sim/echo" {
		t.Fatalf("model_change = %v", mc)
	}
	if ms := find(frames, "message_start", "messageStart"); ms[0]["model"] != "sim/echo" {
		t.Fatalf("message_start = %v", ms)
	}
}
