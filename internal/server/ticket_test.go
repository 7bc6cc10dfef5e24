package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/server/token"
	"github.com/agentd/agentd/internal/testkit"
)

type webTestServer struct {
	app  TestApp
	srv  *Server
	conn *grpc.ClientConn
	base string
}

func startInternal(t *testing.T, yaml string, log *slog.Logger) *webTestServer {
	t.Helper()
	a := startTestApp(t, yaml, log, nil)
	srv := a.Server()
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &webTestServer{app: a, srv: srv, conn: conn, base: "http://" + srv.HTTPAddr()}
}

// A genuine grant (as the HTTP face makes) still only reads the events of
// its own session.
func TestGrantScopeInGRPC(t *testing.T) {
	const bearer = "token-team-a-0123456789"
	ts := startInternal(t, "auth: {tokens: [{token: "+bearer+", tenant: team-a}]}\n", nil)
	ctx := testkit.Context(t)
	client := agentdv1.NewAgentServiceClient(ts.conn)
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+bearer)
	s1, err := client.CreateSession(actx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := client.CreateSession(actx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	gctx := metadata.AppendToOutgoingContext(ctx, token.GrantKey, token.MakeGrant("team-a", s1.GetId()))
	for name, call := range map[string]func() error{
		"GetSession": func() error {
			_, err := client.GetSession(gctx, &agentdv1.GetSessionRequest{SessionId: s1.GetId()})
			return err
		},
		"CreateStreamTicket": func() error {
			_, err := client.CreateStreamTicket(gctx, &agentdv1.CreateStreamTicketRequest{SessionId: s1.GetId()})
			return err
		},
		"AbortRetry": func() error {
			_, err := client.AbortRetry(gctx, &agentdv1.AbortRetryRequest{SessionId: s1.GetId()})
			return err
		},
		"Prompt": func() error {
			st, err := client.Prompt(gctx, &agentdv1.PromptRequest{SessionId: s1.GetId(), Text: "hi"})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		},
		"StreamEvents of another session": func() error {
			st, err := client.StreamEvents(gctx, &agentdv1.StreamEventsRequest{SessionId: s2.GetId()})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		},
		"grant and a good token": func() error {
			st, err := client.StreamEvents(metadata.AppendToOutgoingContext(gctx, "authorization", "Bearer "+bearer), &agentdv1.StreamEventsRequest{SessionId: s2.GetId()})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		},
	} {
		if status.Code(call()) != codes.Unauthenticated {
			t.Errorf("%s with a grant: %v", name, call())
		}
	}
	if s, err := client.GetSession(actx, &agentdv1.GetSessionRequest{SessionId: s1.GetId()}); err != nil || s.GetMessageCount() != 0 {
		t.Fatalf("session after the refused calls: %v %v", s, err)
	}
	// Its own session's events: yes.
	sctx, scancel := context.WithCancel(gctx)
	defer scancel()
	st, err := client.StreamEvents(sctx, &agentdv1.StreamEventsRequest{SessionId: s1.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Prompt(actx, &agentdv1.PromptRequest{SessionId: s1.GetId(), Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	if e, err := st.Recv(); err != nil || e.GetSeq() != 1 {
		t.Fatalf("granted stream: %v %v", e, err)
	}
}

// syncBuffer is a log sink safe for concurrent use.
type syncBuffer = testkit.LogBuffer

// Tickets appear in no log line, whatever happens to them.
func TestTicketsNotLogged(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ts := startInternal(t, "", log)
	ctx := testkit.Context(t)
	post := func(u, body string, h http.Header) []byte {
		req, _ := http.NewRequestWithContext(ctx, "POST", u, strings.NewReader(body))
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	var sess struct{ ID string }
	json.Unmarshal(post(ts.base+"/v1/sessions", `{"model":"sim/echo"}`, nil), &sess)
	var tr struct{ Ticket string }
	json.Unmarshal(post(ts.base+"/v1/sessions/"+sess.ID+":streamTicket", `{}`, nil), &tr)
	if tr.Ticket == "" {
		t.Fatal("no ticket")
	}
	post(ts.base+"/v1/sessions/"+sess.ID+":prompt", `{"text":"hi [[faults: 503,ok]]"}`, http.Header{"Accept": {"application/json"}})
	q := "?ticket=" + url.QueryEscape(tr.Ticket)
	for _, u := range []string{
		"/v1/sessions/" + sess.ID + "/events" + q,
		"/v1/sessions/" + sess.ID + "/events" + q + "x",
		"/v1/sessions/ses_other/events" + q,
		"/v1/sessions/" + sess.ID + q,
	} {
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.base+u, nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 200 {
			io.ReadAll(io.LimitReader(resp.Body, 1))
		}
		resp.Body.Close()
	}
	ts.app.Stop(ctx)
	if out := logs.String(); strings.Contains(out, tr.Ticket) || strings.Contains(out, strings.Split(tr.Ticket, ".")[2]) {
		t.Fatalf("a ticket is in the logs:\n%s", out)
	}
}

// signalWriter is a ResponseWriter that reports each write.
type signalWriter struct {
	mu     sync.Mutex
	h      http.Header
	code   int
	body   bytes.Buffer
	writes chan string
}

func (w *signalWriter) Header() http.Header { return w.h }
func (w *signalWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.code == 0 {
		w.code = code
	}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.code == 0 {
		w.code = 200
	}
	w.body.Write(p)
	w.mu.Unlock()
	w.writes <- string(p)
	return len(p), nil
}
func (w *signalWriter) Flush() {}

// After a ping has sent 200, an error the handler reports becomes an
// "event: error" frame; pings never split a frame; the pinger stops with
// the handler.
func TestHeartbeatWriter(t *testing.T) {
	sw := &signalWriter{h: http.Header{"X-Accel-Buffering": {"no"}}, writes: make(chan string, 1000)}
	hw := newHeartbeatWriter(sw, 5*time.Millisecond)
	if got := <-sw.writes; got != ": ping\n\n" {
		t.Fatalf("first write %q", got)
	}
	sw.mu.Lock()
	if sw.code != 200 || sw.h.Get("Content-Type") != "text/event-stream" || sw.h.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("ping headers %d %v", sw.code, sw.h)
	}
	sw.mu.Unlock()
	hw.Header().Set("Content-Type", "application/json")
	hw.WriteHeader(http.StatusNotFound)
	hw.Write([]byte(`{"code":5,"message":"not found"}`))
	hw.finish()
	var last string
	for len(sw.writes) > 0 {
		last = <-sw.writes
	}
	if last != "event: error\ndata: {\"code\":5,\"message\":\"not found\"}\n\n" {
		t.Fatalf("error frame %q", last)
	}

	// A frame left open by a write is not split by a ping.
	sw = &signalWriter{h: http.Header{}, writes: make(chan string, 100)}
	hw = newHeartbeatWriter(sw, time.Hour)
	idle := func() {
		hw.mu.Lock()
		hw.last = time.Now().Add(-2 * time.Hour)
		hw.mu.Unlock()
	}
	hw.Write([]byte("id: 1\nevent: x\ndata: {}"))
	<-sw.writes
	idle()
	if _, ok := hw.tick(); !ok || len(sw.writes) != 0 {
		t.Fatalf("ping inside a frame (%d writes)", len(sw.writes))
	}
	hw.Write([]byte("\n\n"))
	<-sw.writes
	idle()
	if _, ok := hw.tick(); !ok || len(sw.writes) != 1 || <-sw.writes != ": ping\n\n" {
		t.Fatal("no ping after the frame")
	}
	hw.finish()
	if sw.body.String() != "id: 1\nevent: x\ndata: {}\n\n: ping\n\n" {
		t.Fatalf("body %q", sw.body.String())
	}

	// A handler that commits first keeps its status and headers; no pings
	// follow an error status.
	sw2 := &signalWriter{h: http.Header{}, writes: make(chan string, 100)}
	hw2 := newHeartbeatWriter(sw2, time.Millisecond)
	hw2.Header().Set("Content-Type", "application/json")
	hw2.WriteHeader(http.StatusUnauthorized)
	hw2.Write([]byte(`{}`))
	<-sw2.writes
	if _, ok := hw2.tick(); ok {
		t.Fatal("pings after an error status")
	}
	hw2.finish()
	if sw2.code != 401 || sw2.h.Get("Content-Type") != "application/json" || len(sw2.writes) != 0 {
		t.Fatalf("handler-first: %d %v, %d more writes", sw2.code, sw2.h, len(sw2.writes))
	}
}
