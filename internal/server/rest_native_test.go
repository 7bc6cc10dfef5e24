package server

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/testkit"
)

// The native REST routes answer as the gateway did: each case is sent
// twice to one server, once through the gateway (viaHeader; the prompt
// start: its in-process gRPC call) and once natively, and the raw responses
// (status line, headers, body) must be equal but for the Date header, and
// for the ids and times of what each request created when it created
// something.

// restCase is one request sent both ways. target gives each way its
// target (a fresh session for a delete or a prompt start); fresh says that
// the two answers are of different sessions (ids and times are masked).
type restCase struct {
	name, method string
	target       func() string
	headers      []string
	body         string
	status       string
	fresh        bool
	gateway      bool // the request never reaches the native routes
}

var (
	restIDs        = regexp.MustCompile(`(ses|prm)_[0-9A-Za-z]+`)
	restTimes      = regexp.MustCompile(`"createTime": ?"[^"]*"`)
	restLength     = regexp.MustCompile(`(?m)^Content-Length: \d+\r\n`)
	restJSONType   = "Content-Type: application/json"
	restAcceptJSON = "Accept: application/json"
	restBearerB    = "Authorization: Bearer " + sseTokenB
	// Headers gRPC does not carry, which the gateway drops: a value that is
	// not printable ASCII, a key outside [0-9A-Za-z-_.].
	restNotASCII   = "Grpc-Metadata-Note: caf\xc3\xa9"
	restBadKey     = "Grpc-Metadata-Bad!Key: x"
	restUserAgent  = "User-Agent: agent\xc3\xa9/1" // a permanent header, forwarded too
	restTE         = "TE: trailers"
	restOrigin     = "Origin: http://app.example"
	restExpired    = "Grpc-Timeout: 1n"
	restTimeout    = "Grpc-Timeout: 10S"
	restBadTimeout = "Grpc-Timeout: soon"
	restOverride   = "X-HTTP-Method-Override: GET"
)

// sameREST sends c both ways and returns the native answer, failing unless
// both are equal.
func (ts *sseTestServer) sameREST(t *testing.T, c restCase) string {
	t.Helper()
	gwTarget, natTarget := c.target(), c.target()
	before := ts.native.Load()
	gwOut := ts.open(t, "gateway", c.method, gwTarget, c.headers, c.body).all()
	if ts.native.Load() != before {
		t.Fatalf("%s: the gateway request took the native route", c.name)
	}
	natOut := ts.open(t, "", c.method, natTarget, c.headers, c.body).all()
	if took := ts.native.Load() > before; took == c.gateway {
		t.Fatalf("%s: the native route taken: %v", c.name, took)
	}
	if c.fresh {
		for _, out := range []*string{&gwOut, &natOut} {
			s := restIDs.ReplaceAllString(*out, "${1}_-")
			if s2 := restTimes.ReplaceAllString(s, `"createTime":-`); s2 != s {
				s = restLength.ReplaceAllString(s2, "Content-Length: -\r\n") // the times' lengths vary
			}
			*out = s
		}
	}
	// Raw: the chunks and the trailers too.
	if gwOut != natOut {
		t.Fatalf("%s: the answers differ\ngateway:\n%s\nnative:\n%s", c.name, gwOut, natOut)
	}
	if !strings.HasPrefix(natOut, "HTTP/1.1 "+c.status+" ") {
		t.Fatalf("%s: %q, want %s", c.name, natOut[:min(len(natOut), 400)], c.status)
	}
	return natOut
}

func restTarget(s string) func() string { return func() string { return s } }

func TestNativeRESTMatchesGateway(t *testing.T) {
	ts := startSSE(t, sseAuth+"http: {cors: {allowed_origins: ['http://app.example']}}\n")
	mine := ts.session(t, sseTokenA, "one two")
	other := ts.session(t, sseTokenB, "")
	fresh := func() string { return "/v1/sessions/" + ts.session(t, sseTokenA, "") }
	freshPrompt := func() string { return fresh() + ":prompt" }
	sess := func(id string) func() string { return restTarget("/v1/sessions/" + id) }
	prompt := func(id string) func() string { return restTarget("/v1/sessions/" + id + ":prompt") }
	huge := strings.Repeat("h", 5000)
	const create = "/v1/sessions"
	var cases []restCase

	// POST /v1/sessions.
	for _, c := range []restCase{
		{name: "create", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restJSONType}, status: "200"},
		{name: "create, every field", body: `{"model":"sim/echo","role":"r","systemPrompt":"be brief","retry":{"maxRetries":2,"baseDelayMs":"500"},` +
			`"tools":[{"name":"get_weather","description":"d","inputSchema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`,
			headers: []string{bearerA, restJSONType}, status: "200"},
		{name: "create, no Content-Type", body: `{"model":"sim/echo"}`, headers: []string{bearerA}, status: "200"},
		{name: "create, Accept: application/json", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restAcceptJSON}, status: "200"},
		{name: "create, CORS restOrigin", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restOrigin}, status: "200"},
		{name: "create, TE: trailers", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restTE}, status: "200"},
		{name: "create, Grpc-Timeout", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restTimeout}, status: "200"},
		{name: "create, empty body", headers: []string{bearerA}, status: "400"},
		{name: "create, bad JSON", body: `{"model":`, headers: []string{bearerA, restJSONType}, status: "400"},
		{name: "create, unknown field", body: `{"model":"sim/echo","bogus":1}`, headers: []string{bearerA, restJSONType}, status: "400"},
		{name: "create, wrong type", body: `{"model":5}`, headers: []string{bearerA, restJSONType}, status: "400"},
		{name: "create, not an object", body: `[1]`, headers: []string{bearerA}, status: "400"},
		{name: "create, unknown model", body: `{"model":"nope/x"}`, headers: []string{bearerA, restJSONType}, status: "400"},
		{name: "create, unknown model, TE: trailers", body: `{"model":"nope/x"}`, headers: []string{bearerA, restTE}, status: "400"},
		{name: "create, unknown model, CORS restOrigin", body: `{"model":"nope/x"}`, headers: []string{bearerA, restOrigin}, status: "400"},
		{name: "create, huge model", body: `{"model":"` + huge + `"}`, headers: []string{bearerA}, status: "400"},
		{name: "create, bad retry", body: `{"model":"sim/echo","retry":{"maxRetries":-1}}`, headers: []string{bearerA}, status: "400"},
		{name: "create, a string not UTF-8", body: "{\"model\":\"sim/\xff\"}", headers: []string{bearerA}, status: "400"},
		{name: "create, a lone surrogate", body: `{"model":"\udc00"}`, headers: []string{bearerA}, status: "400"},
		{name: "create, metadata gRPC does not carry", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restNotASCII}, status: "200"},
		{name: "create, a metadata key gRPC does not carry", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restBadKey}, status: "200"},
		{name: "create, User-Agent not ASCII", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restUserAgent}, status: "200"},
		{name: "create, Authorization twice", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restBearerB}, status: "200"},
		{name: "create, deadline passed", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restExpired}, status: "504"},
		{name: "create, deadline passed, TE: trailers", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restExpired, restTE}, status: "504"},
		{name: "create, bad Grpc-Timeout", body: `{"model":"sim/echo"}`, headers: []string{bearerA, restBadTimeout}, status: "400"},
		{name: "create, binary metadata", body: `{"model":"sim/echo"}`, headers: []string{bearerA, "Grpc-Metadata-Blob-Bin: AAEC"}, status: "200"},
		{name: "create, binary metadata not base64", body: `{"model":"sim/echo"}`, headers: []string{bearerA, "Grpc-Metadata-Blob-Bin: !!"}, status: "200"},
		{name: "create, no token (refused before the routes)", body: `{"model":"sim/echo"}`, status: "401", gateway: true},
		{name: "create, bad token (refused before the routes)", body: `{"model":"sim/echo"}`, headers: []string{"Authorization: Bearer nope"}, status: "401", gateway: true},
		{name: "create, a ticket (refused before the routes)", body: `{"model":"sim/echo"}`, headers: []string{bearerA}, status: "401", gateway: true},
		{name: "create, Accept: text/event-stream (the gateway)", body: `{"model":"sim/echo"}`, headers: []string{bearerA, sseAccept}, status: "200", gateway: true},
		{name: "create, the body as an event stream (the gateway: its marshaler answers)", body: `{"model":"sim/echo"}`,
			headers: []string{bearerA, "Content-Type: text/event-stream", restAcceptJSON}, status: "200", gateway: true},
		{name: "create, method override (the gateway)", body: `{"model":"sim/echo"}`, headers: []string{bearerA, "X-HTTP-Method-Override: POST"}, status: "200", gateway: true},
		{name: "create, trailing slash (the gateway)", body: `{"model":"sim/echo"}`, headers: []string{bearerA}, status: "501", gateway: true},
	} {
		c.method, c.target, c.fresh = "POST", restTarget(create), c.status == "200"
		switch {
		case strings.Contains(c.name, "ticket"):
			c.target = restTarget(create + "?ticket=v1.x.y")
		case strings.Contains(c.name, "trailing slash"):
			c.target = restTarget(create + "/")
		}
		cases = append(cases, c)
	}

	// GET /v1/sessions/{id}.
	for _, c := range []restCase{
		{name: "get", target: sess(mine), headers: []string{bearerA}, status: "200"},
		{name: "get, CORS restOrigin", target: sess(mine), headers: []string{bearerA, restOrigin}, status: "200"},
		{name: "get, TE: trailers", target: sess(mine), headers: []string{bearerA, restTE}, status: "200"},
		{name: "get, a query", target: restTarget("/v1/sessions/" + mine + "?sessionId=" + other + "&x=1"), headers: []string{bearerA}, status: "200"},
		{name: "get, a body", target: sess(mine), headers: []string{bearerA, restJSONType}, body: `{"sessionId":"x"}`, status: "200"},
		{name: "get, Grpc-Timeout", target: sess(mine), headers: []string{bearerA, restTimeout}, status: "200"},
		{name: "get, another tenant's session", target: sess(other), headers: []string{bearerA}, status: "404"},
		{name: "get, unknown session", target: sess(missingID), headers: []string{bearerA}, status: "404"},
		{name: "get, unknown session, TE: trailers", target: sess(missingID), headers: []string{bearerA, restTE}, status: "404"},
		{name: "get, malformed id", target: sess("xyz"), headers: []string{bearerA}, status: "400"},
		{name: "get, huge id", target: sess(huge), headers: []string{bearerA}, status: "400"},
		{name: "get, id not UTF-8", target: sess("%FF"), headers: []string{bearerA}, status: "500"},
		{name: "get, id not UTF-8, TE: trailers", target: sess("%FF"), headers: []string{bearerA, restTE}, status: "500"},
		{name: "get, deadline passed", target: sess(mine), headers: []string{bearerA, restExpired}, status: "504"},
		{name: "get, bad Grpc-Timeout", target: sess(mine), headers: []string{bearerA, restBadTimeout}, status: "400"},
		{name: "get, metadata gRPC does not carry", target: sess(mine), headers: []string{bearerA, restNotASCII, restBadKey}, status: "200"},
		{name: "get, token B", target: sess(other), headers: []string{restBearerB}, status: "200"},
		{name: "get, no token (refused before the routes)", target: sess(mine), status: "401", gateway: true},
		{name: "get, escaped path (the gateway)", target: sess("ses%5Faaaaaaaaaaaaaaaaaaaaaaaaaa"), headers: []string{bearerA}, status: "404", gateway: true},
		{name: "get, Accept: text/event-stream (the gateway)", target: sess(mine), headers: []string{bearerA, sseAccept}, status: "200", gateway: true},
		{name: "get, method override (the gateway)", target: sess(mine), headers: []string{bearerA, restOverride}, status: "200", gateway: true},
		{name: "get, a colon in the id (the gateway)", target: sess("a:b"), headers: []string{bearerA}, status: "400", gateway: true},
		{name: "get, no id (the gateway)", target: sess(""), headers: []string{bearerA}, status: "400", gateway: true},
	} {
		c.method = "GET"
		cases = append(cases, c)
	}

	// DELETE /v1/sessions/{id}.
	for _, c := range []restCase{
		{name: "delete", target: fresh, headers: []string{bearerA}, status: "200", fresh: true},
		{name: "delete, CORS restOrigin", target: fresh, headers: []string{bearerA, restOrigin}, status: "200", fresh: true},
		{name: "delete, TE: trailers", target: fresh, headers: []string{bearerA, restTE}, status: "200", fresh: true},
		{name: "delete, a body", target: fresh, headers: []string{bearerA, restJSONType}, body: `{"bogus":1}`, status: "200", fresh: true},
		{name: "delete, another tenant's session", target: sess(other), headers: []string{bearerA}, status: "404"},
		{name: "delete, unknown session", target: sess(missingID), headers: []string{bearerA}, status: "404"},
		{name: "delete, malformed id", target: sess("xyz"), headers: []string{bearerA}, status: "400"},
		{name: "delete, huge id", target: sess(huge), headers: []string{bearerA}, status: "400"},
		{name: "delete, id not UTF-8", target: sess("%FF"), headers: []string{bearerA}, status: "500"},
		{name: "delete, deadline passed", target: sess(mine), headers: []string{bearerA, restExpired}, status: "504"},
		{name: "delete, metadata gRPC does not carry", target: fresh, headers: []string{bearerA, restNotASCII}, status: "200", fresh: true},
		{name: "delete, no token (refused before the routes)", target: sess(mine), status: "401", gateway: true},
		{name: "delete, escaped path (the gateway)", target: sess("ses%5Faaaaaaaaaaaaaaaaaaaaaaaaaa"), headers: []string{bearerA}, status: "404", gateway: true},
	} {
		c.method = "DELETE"
		cases = append(cases, c)
	}

	// POST /v1/sessions/{id}:prompt, started (Accept: application/json or
	// ?stream=false).
	for _, c := range []restCase{
		{name: "start", target: freshPrompt, headers: []string{bearerA, restAcceptJSON, restJSONType}, body: `{"text":"one two"}`, status: "200", fresh: true},
		{name: "start, ?stream=false", target: func() string { return freshPrompt() + "?stream=false" }, headers: []string{bearerA}, body: `{"text":"one two"}`, status: "200", fresh: true},
		{name: "start, CORS restOrigin", target: freshPrompt, headers: []string{bearerA, restAcceptJSON, restOrigin}, body: `{"text":"x"}`, status: "200", fresh: true},
		{name: "start, TE: trailers", target: freshPrompt, headers: []string{bearerA, restAcceptJSON, restTE}, body: `{"text":"x"}`, status: "200", fresh: true},
		{name: "start, Grpc-Timeout", target: freshPrompt, headers: []string{bearerA, restAcceptJSON, restTimeout}, body: `{"text":"x"}`, status: "200", fresh: true},
		{name: "start, escaped path", target: func() string { return strings.Replace(freshPrompt(), "ses_", "ses%5F", 1) }, headers: []string{bearerA, restAcceptJSON}, body: `{"text":"x"}`, status: "200", fresh: true},
		{name: "start, sessionId in the body", target: prompt(missingID), headers: []string{bearerA, restAcceptJSON}, body: `{"text":"x","sessionId":"` + mine + `"}`, status: "404"},
		{name: "start, unknown session", target: prompt(missingID), headers: []string{bearerA, restAcceptJSON}, body: `{"text":"x"}`, status: "404"},
		{name: "start, another tenant's session", target: prompt(other), headers: []string{bearerA, restAcceptJSON}, body: `{"text":"x"}`, status: "404"},
		{name: "start, malformed id", target: prompt("xyz"), headers: []string{bearerA, restAcceptJSON}, body: `{"text":"x"}`, status: "400"},
		{name: "start, huge id", target: prompt(huge), headers: []string{bearerA, restAcceptJSON}, body: `{"text":"x"}`, status: "400"},
		{name: "start, id not UTF-8", target: prompt("%FF"), headers: []string{bearerA, restAcceptJSON}, body: `{"text":"x"}`, status: "500"},
		{name: "start, bad JSON", target: prompt(mine), headers: []string{bearerA, restAcceptJSON}, body: `{"text":`, status: "400"},
		{name: "start, unknown field", target: prompt(mine), headers: []string{bearerA, restAcceptJSON}, body: `{"text":"x","bogus":1}`, status: "400"},
		{name: "start, wrong type", target: prompt(mine), headers: []string{bearerA, restAcceptJSON}, body: `{"text":5}`, status: "400"},
		{name: "start, empty text", target: prompt(mine), headers: []string{bearerA, restAcceptJSON}, body: `{}`, status: "400"},
		{name: "start, empty body", target: prompt(mine), headers: []string{bearerA, restAcceptJSON}, status: "400"},
		{name: "start, bad fault script", target: prompt(mine), headers: []string{bearerA, restAcceptJSON}, body: `{"text":"[[faults: nope]]"}`, status: "400"},
		{name: "start, deadline passed", target: prompt(mine), headers: []string{bearerA, restAcceptJSON, restExpired}, body: `{"text":"x"}`, status: "504"},
		{name: "start, bad Grpc-Timeout", target: prompt(mine), headers: []string{bearerA, restAcceptJSON, restBadTimeout}, body: `{"text":"x"}`, status: "400"},
		{name: "start, metadata gRPC does not carry", target: freshPrompt, headers: []string{bearerA, restAcceptJSON, restNotASCII}, body: `{"text":"x"}`, status: "200", fresh: true},
		{name: "start, bad ?stream (refused before the routes)", target: restTarget("/v1/sessions/" + mine + ":prompt?stream=maybe"), headers: []string{bearerA}, body: `{"text":"x"}`, status: "400", gateway: true},
		{name: "start, no token (refused before the routes)", target: prompt(mine), headers: []string{restAcceptJSON}, body: `{"text":"x"}`, status: "401", gateway: true},
	} {
		c.method = "POST"
		cases = append(cases, c)
	}

	// The event streams meet the checks of the gateway's client too.
	cases = append(cases, []restCase{
		{name: "sse events, deadline passed", method: "GET", target: restTarget("/v1/sessions/" + mine + "/events"), headers: []string{bearerA, sseAccept, restExpired}, status: "504"},
		{name: "sse prompt, deadline passed", method: "POST", target: prompt(mine), headers: []string{bearerA, sseAccept, restExpired}, body: `{"text":"x"}`, status: "504"},
		{name: "sse prompt, deadline passed, TE: trailers", method: "POST", target: prompt(mine), headers: []string{bearerA, sseAccept, restExpired, restTE}, body: `{"text":"x"}`, status: "504"},
	}...)

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { ts.sameREST(t, c) })
	}

	// A busy session: a prompt hangs.
	busy := ts.session(t, sseTokenA, "")
	hang := ts.open(t, "", "POST", "/v1/sessions/"+busy+":prompt", []string{sseAccept, bearerA}, `{"text":"[[faults: hang]]"}`)
	hang.until("event: message_start")
	got := ts.sameREST(t, restCase{name: "start, busy", method: "POST", target: prompt(busy), headers: []string{bearerA, restAcceptJSON},
		body: `{"text":"x"}`, status: "400"})
	if !strings.Contains(got, `"code":9`) && !strings.Contains(got, `"code": 9`) {
		t.Errorf("busy: %q", got)
	}
	// A deleted session is gone for the other way too.
	id := ts.session(t, sseTokenA, "")
	ts.open(t, "", "DELETE", "/v1/sessions/"+id, []string{bearerA}, "").all()
	ts.sameREST(t, restCase{name: "get, deleted", method: "GET", target: sess(id), headers: []string{bearerA}, status: "404"})
}

// The engine's limits answer the same: RESOURCE_EXHAUSTED, 429.
func TestNativeRESTLimitsMatchGateway(t *testing.T) {
	ts := startSSE(t, "sessions: {max_sessions: 1}\n")
	ts.session(t, "", "")
	got := ts.sameREST(t, restCase{name: "create at the limit", method: "POST", target: restTarget("/v1/sessions"),
		body: `{"model":"sim/echo"}`, status: "429"})
	if !strings.Contains(got, "RESOURCE_EXHAUSTED") && !strings.Contains(got, `"code":8`) && !strings.Contains(got, `"code": 8`) {
		t.Errorf("limit: %q", got)
	}
}

// The gRPC server's receive limit (limits.max_request_bytes) holds on the
// native routes as on the gateway's call: a body within the HTTP face's
// limit whose message is not is refused as the gRPC server refused it.
func TestNativeRESTReceiveLimit(t *testing.T) {
	ts := startSSE(t, "limits: {max_request_bytes: 4096}\nsessions: {max_prompt_bytes: 1024}\n")
	tool := func(n int) string {
		return `{"model":"sim/echo","tools":[{"name":"t","inputSchema":{"type":"object","x":[` + strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}}]}`
	}
	// Within 4096 bytes, as JSON and as a message: created.
	ts.sameREST(t, restCase{name: "within the limit", method: "POST", target: restTarget("/v1/sessions"), body: tool(100), status: "200", fresh: true})
	// Within 4096 bytes of JSON, but a list of numbers takes 11 bytes an
	// item as a message: the gRPC server's limit.
	got := ts.sameREST(t, restCase{name: "over the gRPC limit", method: "POST", target: restTarget("/v1/sessions"), body: tool(1500), status: "429"})
	if !strings.Contains(got, "grpc: received message larger than max") {
		t.Fatalf("over the gRPC limit: %q", got)
	}
}

// The gRPC server's metrics (grpc_server_*) see the native REST calls as
// they saw the gateway's: the same calls, codes and message counts. A
// prompt start's call ends with its first event (CANCELED: the provider is
// slow to answer here, so that the gateway's call was cancelled before the
// prompt ended, as with real providers); the events its stream sent before
// the cancel reached the server are not counted (the gateway's call did not
// control them).
func TestNativeRESTMetricsMatchGateway(t *testing.T) {
	scenario := func(via string) []string {
		ts := startSSE(t, sseAuth+"providers: [{name: sim, kind: simulated, first_token_delay_ms: 300}]\n")
		do := func(method, target, body string, headers ...string) {
			ts.open(t, via, method, target, append(headers, bearerA), body).all()
		}
		for range 2 {
			do("POST", "/v1/sessions", `{"model":"sim/echo"}`)
		}
		do("POST", "/v1/sessions", `{"model":"nope/x"}`)
		do("POST", "/v1/sessions", `{"model":`)
		do("POST", "/v1/sessions", `{"model":"sim/echo"}`, restExpired)
		id := ts.session(t, sseTokenA, "")
		do("GET", "/v1/sessions/"+id, "")
		do("GET", "/v1/sessions/"+missingID, "")
		do("GET", "/v1/sessions/xyz", "")
		do("GET", "/v1/sessions/%FF", "")
		do("POST", "/v1/sessions/"+id+":prompt", `{"text":"a b"}`, restAcceptJSON)
		do("POST", "/v1/sessions/"+missingID+":prompt", `{"text":"a b"}`, restAcceptJSON)
		do("POST", "/v1/sessions/"+id+":prompt", `{"text":5}`, restAcceptJSON)
		do("DELETE", "/v1/sessions/"+missingID, "")
		// Waited for through the engine: no call counted.
		sess, err := ts.srv.Sessions().Get(context.Background(), "team-a", id)
		if err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "the prompt ended", func() bool { return sess.State().Status == "idle" })
		do("DELETE", "/v1/sessions/"+id, "")
		resp, err := http.Get(ts.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "grpc_server_") && !strings.Contains(line, "_bucket") && !strings.Contains(line, "_sum") &&
				!strings.HasSuffix(line, " 0") && !strings.HasPrefix(line, `grpc_server_msg_sent_total{grpc_method="Prompt"`) {
				out = append(out, line)
			}
		}
		return out
	}
	gw, nat := scenario("gateway"), scenario("")
	if strings.Join(gw, "\n") != strings.Join(nat, "\n") {
		t.Fatalf("grpc_server_* differ\ngateway:\n%s\nnative:\n%s", strings.Join(gw, "\n"), strings.Join(nat, "\n"))
	}
	for _, want := range []string{`grpc_method="CreateSession"`, `grpc_method="GetSession"`, `grpc_method="DeleteSession"`, `grpc_code="NotFound"`,
		`grpc_server_handled_total{grpc_code="Canceled",grpc_method="Prompt"`} {
		if !strings.Contains(strings.Join(nat, "\n"), want) {
			t.Fatalf("no %s counted:\n%s", want, strings.Join(nat, "\n"))
		}
	}
}
