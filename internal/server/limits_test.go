package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/testkit"
)

// wantCode checks a gRPC error's code and its whole message.
func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if st, _ := status.FromError(err); st.Code() != code || st.Message() != msg {
		t.Fatalf("%s: %v; want %v %q", what, err, code, msg)
	}
}

// The limits section over gRPC and REST: a tenant at
// limits.max_sessions_per_tenant or max_concurrent_prompts_per_tenant gets
// RESOURCE_EXHAUSTED (REST 429) naming the limit, a session asking for too
// many tools, too big a system prompt or retry overrides beyond the caps
// gets INVALID_ARGUMENT (REST 400) naming the field and the limit; nothing
// changes; the other tenant is not concerned.
func TestLimitsOverGRPCAndREST(t *testing.T) {
	ts := start(t, webAuth+"limits: {max_sessions_per_tenant: 2, max_concurrent_prompts_per_tenant: 1, max_tools: 2, max_system_prompt_bytes: 64}\n")
	ctx := testkit.Context(t)
	asA := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+webTokenA)
	asB := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+webTokenB)
	create := func(ctx context.Context, req *agentdv1.CreateSessionRequest) (*agentdv1.Session, error) {
		req.Model = "sim/echo"
		return ts.agent.CreateSession(ctx, req)
	}
	count := func(ctx context.Context) int {
		t.Helper()
		res, err := ts.agent.ListSessions(ctx, &agentdv1.ListSessionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.GetSessions())
	}

	// Sessions per tenant.
	s1 := must(create(asA, &agentdv1.CreateSessionRequest{}))
	s2 := must(create(asA, &agentdv1.CreateSessionRequest{}))
	const sessionsMsg = "limits.max_sessions_per_tenant: tenant has 2 sessions, the limit; delete one before creating another"
	_, err := create(asA, &agentdv1.CreateSessionRequest{})
	wantCode(t, "CreateSession at the limit", err, codes.ResourceExhausted, sessionsMsg)
	wantStatus(t, webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions", `{"model":"sim/echo"}`, webTokenA, nil),
		http.StatusTooManyRequests, codes.ResourceExhausted, sessionsMsg)
	if n := count(asA); n != 2 {
		t.Fatalf("team-a has %d sessions", n)
	}
	other := must(create(asB, &agentdv1.CreateSessionRequest{}))

	// Tools, system prompt, retry overrides: refused whatever the count.
	hammer := int32(2147483647)
	zero, low := int64(0), int64(99)
	for _, tc := range []struct {
		name string
		req  *agentdv1.CreateSessionRequest
		msg  string
	}{
		{"tools", &agentdv1.CreateSessionRequest{Tools: []*agentdv1.Tool{{Name: "a"}, {Name: "b"}, {Name: "c"}}},
			"tools: has 3 tools, more than limits.max_tools (2)"},
		{"system prompt", &agentdv1.CreateSessionRequest{SystemPrompt: strings.Repeat("x", 65)},
			"system_prompt: is 65 bytes, more than limits.max_system_prompt_bytes (64)"},
		{"base delay", &agentdv1.CreateSessionRequest{Retry: &agentdv1.RetrySettings{BaseDelayMs: &low}},
			"retry.base_delay_ms: 99 is below limits.min_base_delay_ms (100)"},
		{"max retries", &agentdv1.CreateSessionRequest{Retry: &agentdv1.RetrySettings{MaxRetries: &hammer}},
			"retry.max_retries: 2147483647 is above limits.max_retries_cap (20)"},
		{"the hammer", &agentdv1.CreateSessionRequest{Retry: &agentdv1.RetrySettings{MaxRetries: &hammer, BaseDelayMs: &zero}},
			"retry.base_delay_ms: 0 is below limits.min_base_delay_ms (100)"},
	} {
		_, err := create(asB, tc.req)
		wantCode(t, tc.name, err, codes.InvalidArgument, tc.msg)
	}
	for body, msg := range map[string]string{
		`{"model":"sim/echo","retry":{"maxRetries":2147483647,"baseDelayMs":0}}`: "retry.base_delay_ms: 0 is below limits.min_base_delay_ms (100)",
		`{"model":"sim/echo","tools":[{"name":"a"},{"name":"b"},{"name":"c"}]}`:  "tools: has 3 tools, more than limits.max_tools (2)",
	} {
		wantStatus(t, webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions", body, webTokenB, nil),
			http.StatusBadRequest, codes.InvalidArgument, msg)
	}
	if n := count(asB); n != 1 {
		t.Fatalf("refused requests left team-b with %d sessions", n)
	}

	// Concurrent prompts per tenant.
	running, err := ts.agent.Prompt(asA, &agentdv1.PromptRequest{SessionId: s1.GetId(), Text: "hang [[faults: hang]]"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := running.Recv(); err != nil {
		t.Fatal(err)
	}
	const promptsMsg = "limits.max_concurrent_prompts_per_tenant: tenant has 1 prompts running, the limit; wait for one's prompt_end"
	wantCode(t, "Prompt at the limit", promptErr(asA, ts, s2.GetId(), "refused"), codes.ResourceExhausted, promptsMsg)
	for _, accept := range []string{"application/json", "text/event-stream"} {
		wantStatus(t, webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+s2.GetId()+":prompt", `{"text":"refused"}`, webTokenA,
			http.Header{"Accept": {accept}}), http.StatusTooManyRequests, codes.ResourceExhausted, promptsMsg)
	}
	got, err := ts.agent.GetSession(asA, &agentdv1.GetSessionRequest{SessionId: s2.GetId()})
	if err != nil || got.GetStatus() != "idle" || got.GetMessageCount() != 0 || got.GetLastSeq() != 0 {
		t.Fatalf("the refused session = %v, %v", got, err)
	}
	msgs, err := ts.agent.ListMessages(asA, &agentdv1.ListMessagesRequest{SessionId: s2.GetId()})
	if err != nil || len(msgs.GetMessages()) != 0 {
		t.Fatalf("history of the refused session = %v, %v", msgs, err)
	}
	// team-b prompts meanwhile.
	if evs := collect(t, must(ts.agent.Prompt(asB, &agentdv1.PromptRequest{SessionId: other.GetId(), Text: "mine"}))); len(evs) == 0 ||
		evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("team-b's prompt: %v", types(evs))
	}
	// The slot frees with the prompt's end.
	if _, err := ts.agent.Abort(asA, &agentdv1.AbortRequest{SessionId: s1.GetId()}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := running.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if evs := collect(t, must(ts.agent.Prompt(asA, &agentdv1.PromptRequest{SessionId: s2.GetId(), Text: "now"}))); len(evs) == 0 ||
		evs[len(evs)-1].GetPromptEnd().GetOutcome() != "completed" {
		t.Fatalf("prompt after the abort: %v", types(evs))
	}
	// A deleted session frees its place.
	if _, err := ts.agent.DeleteSession(asA, &agentdv1.DeleteSessionRequest{SessionId: s1.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := create(asA, &agentdv1.CreateSessionRequest{}); err != nil {
		t.Fatalf("CreateSession after a delete: %v", err)
	}
}

// A hostile tenant's followers and keys stay bounded: at
// limits.max_streams_per_tenant a StreamEvents stream, over gRPC, SSE or
// a stream ticket alike, is RESOURCE_EXHAUSTED (REST 429) naming the
// limit, the other tenant's streams are not concerned, and a stream that
// ends gives its place back. At limits.max_credentials_per_tenant a
// tenant's own credential is refused the same way; an admin's server
// credentials are not bounded, and a secret over 64 KiB is bad input.
func TestStreamsAndCredentialsPerTenant(t *testing.T) {
	const admin = "token-ops-0123456789"
	ts := start(t, "auth: {tokens: [{token: "+webTokenA+", tenant: team-a}, {token: "+webTokenB+", tenant: team-b}, {token: "+admin+", tenant: ops, admin: true}]}\n"+
		"limits: {max_streams_per_tenant: 2, max_credentials_per_tenant: 2}\n")
	ctx := testkit.Context(t)
	asA := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+webTokenA)
	asB := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+webTokenB)
	asOps := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+admin)
	idA := webSession(t, ctx, ts.baseURL, webTokenA)
	idB := webSession(t, ctx, ts.baseURL, webTokenB)
	for _, s := range []struct{ id, token string }{{idA, webTokenA}, {idB, webTokenB}} {
		webJSON(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+s.id+":prompt", `{"text":"one"}`, s.token, http.Header{"Accept": {"application/json"}}, 200)
	}

	// follow opens a gRPC stream and reads its first event: the server
	// holds the stream's place from then on.
	follow := func(ctx context.Context, id string) (context.CancelFunc, error) {
		t.Helper()
		ctx, cancel := context.WithCancel(ctx)
		stream, err := ts.agent.StreamEvents(ctx, &agentdv1.StreamEventsRequest{SessionId: id})
		if err == nil {
			_, err = stream.Recv()
		}
		if err != nil {
			cancel()
			return nil, err
		}
		return cancel, nil
	}
	var closers []context.CancelFunc
	for range 2 {
		closers = append(closers, must(follow(asA, idA)))
	}
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	const streamsMsg = "limits.max_streams_per_tenant: tenant has 2 event streams open on this replica, the limit; close one before opening another"
	_, err := follow(asA, idA)
	wantCode(t, "a third stream over gRPC", err, codes.ResourceExhausted, streamsMsg)
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+idA+"/events", "", webTokenA, sseAccept),
		http.StatusTooManyRequests, codes.ResourceExhausted, streamsMsg)
	ticket, _ := ticketFor(t, ctx, ts.baseURL, idA, webTokenA)
	wantStatus(t, webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+idA+"/events?ticket="+url.QueryEscape(ticket), "", "", sseAccept),
		http.StatusTooManyRequests, codes.ResourceExhausted, streamsMsg)
	// The tenant's prompts and the other tenant's streams go on.
	webJSON(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+idA+":prompt", `{"text":"two"}`, webTokenA, http.Header{"Accept": {"application/json"}}, 200)
	for range 2 {
		closers = append(closers, must(follow(asB, idB)))
	}
	// A stream that ends gives its place back; the SSE one then holds it
	// until its response is closed.
	closers[0]()
	testkit.Eventually(t, "team-a's closed stream gave its place back", func() bool { return ts.srv.StreamsOpen("team-a") == 1 })
	resp := webReq(t, ctx, "GET", ts.baseURL+"/v1/sessions/"+idA+"/events?ticket="+url.QueryEscape(ticket), "", "", sseAccept)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events after a place came free = %d", resp.StatusCode)
	}
	newWebFrames(t, resp.Body).until("prompt_end")
	_, err = follow(asA, idA)
	wantCode(t, "a stream while the SSE one is open", err, codes.ResourceExhausted, streamsMsg)
	resp.Body.Close()
	testkit.Eventually(t, "the closed SSE stream gave its place back", func() bool { return ts.srv.StreamsOpen("team-a") == 1 })
	closers = append(closers, must(follow(asA, idA)))

	// Credentials: a tenant's own, per provider.
	add := func(ctx context.Context, id, secret string) error {
		_, err := ts.creds.CreateCredential(ctx, &agentdv1.CreateCredentialRequest{Provider: "sim", Id: id, Secret: secret})
		return err
	}
	for _, id := range []string{"a1", "a2"} {
		if err := add(asA, id, "sk-"+id); err != nil {
			t.Fatal(err)
		}
	}
	const credsMsg = `limits.max_credentials_per_tenant: tenant has 2 credentials of provider "sim", the limit; delete one before adding another`
	wantCode(t, "a third credential", add(asA, "a3", "sk-a3"), codes.ResourceExhausted, credsMsg)
	wantStatus(t, webReq(t, ctx, "POST", ts.baseURL+"/v1/credentials", `{"provider":"sim","id":"a3","secret":"sk-a3"}`, webTokenA, nil),
		http.StatusTooManyRequests, codes.ResourceExhausted, credsMsg)
	if n := len(must(ts.creds.ListCredentials(asA, &agentdv1.ListCredentialsRequest{})).GetCredentials()); n != 2 {
		t.Fatalf("team-a lists %d credentials after the refusals; want its 2", n)
	}
	if err := add(asB, "a3", "sk-b"); err != nil {
		t.Fatalf("team-b's first credential: %v", err)
	}
	for i := range 3 {
		if err := add(asOps, fmt.Sprintf("server%d", i), "sk-server"); err != nil {
			t.Fatalf("an admin's server credential %d: %v", i, err)
		}
	}
	if _, err := ts.creds.DeleteCredential(asA, &agentdv1.DeleteCredentialRequest{CredentialId: "a1"}); err != nil {
		t.Fatal(err)
	}
	if err := add(asA, "a3", "sk-a3"); err != nil {
		t.Fatalf("a credential after a delete made room: %v", err)
	}
	wantCode(t, "a 64 KiB + 1 secret", add(asB, "big", strings.Repeat("k", 64<<10+1)), codes.InvalidArgument,
		"secret: is 65537 bytes, more than 65536")
}

// A session whose history holds limits.max_history_bytes: its next prompt
// is 429 naming the limit, over REST and gRPC; the history keeps what it
// had.
func TestHistoryLimitOverGRPCAndREST(t *testing.T) {
	ts := start(t, webAuth+"limits: {max_history_bytes: 3000}\n")
	ctx := testkit.Context(t)
	id := webSession(t, ctx, ts.baseURL, webTokenA)
	resp := webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"`+strings.Repeat("z", 1500)+`"}`, webTokenA, sseAccept)
	newWebFrames(t, resp.Body).until("prompt_end")
	resp.Body.Close()
	const prefix = "limits.max_history_bytes: the session's history holds "
	wantStatus(t, webReq(t, ctx, "POST", ts.baseURL+"/v1/sessions/"+id+":prompt", `{"text":"more"}`, webTokenA, sseAccept),
		http.StatusTooManyRequests, codes.ResourceExhausted, prefix)
	asA := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+webTokenA)
	stream, err := ts.agent.Prompt(asA, &agentdv1.PromptRequest{SessionId: id, Text: "more"})
	if err == nil {
		_, err = stream.Recv()
	}
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.HasPrefix(st.Message(), prefix) {
		t.Fatalf("gRPC prompt past the history's limit: %v", err)
	}
	if n := len(must(ts.agent.ListMessages(asA, &agentdv1.ListMessagesRequest{SessionId: id})).GetMessages()); n != 2 {
		t.Fatalf("history after the refusals: %d entries; want 2", n)
	}
}
