package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
)

// A long backoff: the prompt sits in its retry chain until something ends
// it.
const slowRetry = "retry: {base_delay_ms: 60000}\n"

const failing = "[[faults: 529,529,529,529,529,529,529,529,529,529,529]]"

// followToEnd reads the session's events from the start up to prompt_end.
func followToEnd(t *testing.T, ctx context.Context, ts *testServer, id string) []*agentdv1.Event {
	t.Helper()
	stream := must(ts.agent.StreamEvents(ctx, &agentdv1.StreamEventsRequest{SessionId: id}))
	var evs []*agentdv1.Event
	for {
		e, err := stream.Recv()
		if err != nil {
			t.Fatalf("StreamEvents after %s: %v", compact(types(evs)), err)
		}
		evs = append(evs, e)
		if e.GetPromptEnd() != nil {
			return evs
		}
	}
}

// checkCallerGone: the prompt was aborted in its backoff, its chain and
// prompt_end saying why.
func checkCallerGone(t *testing.T, evs []*agentdv1.Event) {
	t.Helper()
	var end *agentdv1.AutoRetryEnd
	for _, e := range evs {
		if x := e.GetAutoRetryEnd(); x != nil {
			end = x
		}
	}
	if end == nil || end.GetSuccess() || end.GetFinalError() != "caller disconnected" {
		t.Fatalf("auto_retry_end = %v in %s", end, compact(types(evs)))
	}
	if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "aborted" || pe.GetError() != "caller disconnected" {
		t.Fatalf("prompt_end = %v", pe)
	}
}

// cancel_on_disconnect over gRPC: the client cancels its Prompt stream
// while the prompt waits in a backoff, and the prompt ends; without it the
// prompt goes on.
func TestCancelOnDisconnectOverGRPC(t *testing.T) {
	ts := start(t, slowRetry)
	ctx := testkit.Context(t)
	for _, cancelOn := range []bool{true, false} {
		sess := must(ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"}))
		sctx, cancel := context.WithCancel(ctx)
		stream := must(ts.agent.Prompt(sctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: failing, CancelOnDisconnect: cancelOn}))
		for {
			e, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if e.GetAutoRetryStart() != nil {
				break
			}
		}
		cancel()
		if !cancelOn {
			// The prompt is still retrying: a new one is refused.
			_, err := ts.agent.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: sess.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			st := must(ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "again"}))
			if _, err := st.Recv(); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("a prompt while the first retries: %v", err)
			}
			must(ts.agent.Abort(ctx, &agentdv1.AbortRequest{SessionId: sess.GetId()}))
			evs := followToEnd(t, ctx, ts, sess.GetId())
			if pe := evs[len(evs)-1].GetPromptEnd(); pe.GetOutcome() != "aborted" || pe.GetError() != "Retry cancelled" {
				t.Fatalf("prompt_end after Abort = %v", pe)
			}
			continue
		}
		checkCallerGone(t, followToEnd(t, ctx, ts, sess.GetId()))
	}
}

// cancel_on_disconnect over REST/SSE: the client closes its event stream
// (the response body) during the backoff, and the prompt ends. The REST
// start (no stream) refuses the field.
func TestCancelOnDisconnectOverSSE(t *testing.T) {
	ts := start(t, slowRetry)
	ctx := testkit.Context(t)
	id := createREST(t, ctx, ts.baseURL, `{"model":"sim/echo"}`, nil)
	rctx, cancel := context.WithCancel(ctx)
	resp := postJSON(t, rctx, ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"`+failing+`","cancelOnDisconnect":true}`,
		http.Header{"Accept": {"text/event-stream"}})
	frames := readSSE(t, resp.Body, func(f sseFrame) bool { return f.event == "auto_retry_start" })
	if len(frames) == 0 || frames[len(frames)-1].event != "auto_retry_start" {
		t.Fatalf("frames before the disconnect: %v", frames)
	}
	cancel()
	resp.Body.Close()
	checkCallerGone(t, followToEnd(t, ctx, ts, id))

	// The start answers at once: there is no caller to watch.
	resp = postJSON(t, ctx, ts.baseURL+"/v1/sessions/"+id+":prompt?stream=false", `{"text":"hi","cancelOnDisconnect":true}`, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "cancel_on_disconnect") {
		t.Fatalf("start with cancelOnDisconnect: %d %s", resp.StatusCode, body)
	}
}
