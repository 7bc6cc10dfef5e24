package server_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/provider/providertest"
	"github.com/agentd/agentd/internal/redistest"
	"github.com/agentd/agentd/internal/testkit"
)

// redisRoundTripsBy reads agentd_redis_round_trips_total off /metrics:
// every component's, and the credential store's.
func redisRoundTripsBy(t *testing.T, base string) (all, creds int) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Error(err)
		return -1, -1
	}
	defer resp.Body.Close()
	n, c := 0.0, 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "agentd_redis_round_trips_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			n += v
			if strings.Contains(line, `component="credentials"`) {
				c += v
			}
		}
	}
	return int(n), int(c)
}

// The Redis round trips a prompt makes before its model call, with sessions
// and credentials in Redis, counted by agentd's own round-trip metric at
// the moment the provider receives the call (the machine's speed does not
// enter into it). On the prompt's way there is one: the start's pipeline
// (the start script — lease with its epoch, run, user message — and the
// credential store's pick script, on one client). The session's event
// writer stores agent_start and message_start meanwhile, off that way (a
// batch is one pipeline: a fenced script per session and its
// notification), so the total seen at the call is 1 plus one or two
// batches (2 or 3 measured). The guard: no credential round trip of its
// own, and at most 1 + two batches in all.
func TestRedisRoundTripsBeforeTheModelCall(t *testing.T) {
	t.Setenv("AGENTD_TEST_RT_KEY", "sk-ant-roundtrips-0123456789")
	for _, tc := range []struct{ name, creds string }{
		{"a credential", "\n    credentials: [{id: main, api_key_env: AGENTD_TEST_RT_KEY}]"},
		// A provider that takes none (a model server of one's own): the
		// start's pick answers that there is none, and the call does not
		// ask again.
		{"no credentials", ""},
	} {
		t.Run(tc.name, func(t *testing.T) { roundTripsBeforeTheModelCall(t, tc.creds) })
	}
}

func roundTripsBeforeTheModelCall(t *testing.T, creds string) {
	rs := redistest.Start(t)
	var base atomic.Value
	var atAll, atCreds atomic.Int64
	fake := providertest.NewServer(providertest.Options{Script: func(r *providertest.Request) providertest.Step {
		if b, ok := base.Load().(string); ok && atAll.Load() < 0 {
			all, creds := redisRoundTripsBy(t, b)
			atAll.Store(int64(all))
			atCreds.Store(int64(creds))
		}
		return providertest.Step{}
	}})
	t.Cleanup(fake.Close)
	// The background's round trips (credential sync, janitor) are made rare.
	ts := start(t, fmt.Sprintf(`store:
  backend: redis
  redis: {addr: %q, sync_interval_ms: 60000, lease_ms: 600000}
providers:
  - name: up
    kind: anthropic
    base_url: %s%s
`, rs.Addr(), fake.URL, creds))
	ctx := testkit.Context(t)
	sess, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "up/claude-sonnet-4-5"})
	if err != nil {
		t.Fatal(err)
	}
	base.Store(ts.baseURL)
	for i := range 4 {
		// A scrape refreshes the store gauges (round trips of its own), and
		// the previous prompt's last writes (its events, the lease's
		// release) may still be under way: read until two scrapes in a row
		// cost the same, which is then what one costs, to take off the
		// reading at the call.
		all0, creds0 := redisRoundTripsBy(t, ts.baseURL)
		all1, creds1 := redisRoundTripsBy(t, ts.baseURL)
		for range 50 {
			all2, creds2 := redisRoundTripsBy(t, ts.baseURL)
			stable := all2-all1 == all1-all0 && creds2-creds1 == creds1-creds0
			all0, creds0, all1, creds1 = all1, creds1, all2, creds2
			if stable {
				break
			}
		}
		scrapeAll, scrapeCreds := all1-all0, creds1-creds0
		atAll.Store(-1)
		stream, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, stream)
		if end := evs[len(evs)-1]; end.GetPromptEnd().GetOutcome() != "completed" {
			t.Fatalf("prompt %d: %v", i, compact(types(evs)))
		}
		all := int(atAll.Load()) - all1 - scrapeAll
		creds := int(atCreds.Load()) - creds1 - scrapeCreds
		t.Logf("prompt %d: %d Redis round trips before the model call, %d of them the credential store's", i, all, creds)
		if i == 0 {
			continue // the first loads the scripts
		}
		if creds != 0 {
			t.Errorf("prompt %d: %d credential round trips before the model call, want 0 (the pick rides the start's)", i, creds)
		}
		if all > 3 {
			t.Errorf("prompt %d: %d Redis round trips before the model call, want at most 3 (1 on the way, up to 2 event batches)", i, all)
		}
	}
}

// The start's pipeline after Redis forgot its scripts (a restart, a
// failover: NOSCRIPT) — the start script's, the pick script's, or both —
// still starts the prompt: the start script runs again by its text, the
// pick is made again by the call.
func TestPromptStartAfterScriptFlush(t *testing.T) {
	rs := redistest.Start(t)
	t.Setenv("AGENTD_TEST_RT_KEY", "sk-ant-roundtrips-0123456789")
	fake := providertest.NewServer(providertest.Options{})
	t.Cleanup(fake.Close)
	ts := start(t, fmt.Sprintf(`store:
  backend: redis
  redis: {addr: %q}
providers:
  - name: up
    kind: anthropic
    base_url: %s
    credentials: [{id: main, api_key_env: AGENTD_TEST_RT_KEY}]
`, rs.Addr(), fake.URL))
	ctx := testkit.Context(t)
	sess, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "up/claude-sonnet-4-5"})
	if err != nil {
		t.Fatal(err)
	}
	rc := redistest.Client(t, rs.Addr())
	for i := range 3 {
		if err := rc.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		stream, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, stream)
		if end := evs[len(evs)-1]; end.GetPromptEnd().GetOutcome() != "completed" {
			t.Fatalf("prompt %d after SCRIPT FLUSH: %v", i, compact(types(evs)))
		}
	}
	if n := len(fake.Requests()); n != 3 {
		t.Fatalf("%d model calls, want 3", n)
	}
}

// A replica whose session lease was taken mid-stream (here: overwritten,
// as another replica's takeover after an expiry would leave it) writes
// nothing more and ends its caller's stream with UNAVAILABLE naming the
// seq to resume from; every event the caller got is in the stored log.
func TestPromptStreamEndsWhenTheLeaseIsLost(t *testing.T) {
	rs := redistest.Start(t)
	ts := start(t, fmt.Sprintf(`store:
  backend: redis
  redis: {addr: %q, key_prefix: "rt:"}
providers: [{name: sim, kind: simulated, token_delay_ms: 10}]
`, rs.Addr()))
	ctx := testkit.Context(t)
	sess, err := ts.agent.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := ts.agent.Prompt(ctx, &agentdv1.PromptRequest{SessionId: sess.GetId(), Text: "a long answer [[tokens: 3000]]"})
	if err != nil {
		t.Fatal(err)
	}
	var got []*agentdv1.Event
	for len(got) < 5 {
		e, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	rc := redistest.Client(t, rs.Addr())
	if err := rc.Set(ctx, "rt:{"+sess.GetId()+"}:lease", "rep_other", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		e, err := stream.Recv()
		if err == nil {
			if e.GetPromptEnd() != nil {
				t.Fatalf("a prompt_end after the lease was lost: %v", e)
			}
			got = append(got, e)
			continue
		}
		st, _ := status.FromError(err)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "session lease lost") ||
			!strings.Contains(st.Message(), "resume after seq "+strconv.FormatUint(got[len(got)-1].GetSeq(), 10)) {
			t.Fatalf("stream ended with %v, after seq %d", err, got[len(got)-1].GetSeq())
		}
		break
	}
	stored, err := rc.XRange(ctx, "rt:{"+sess.GetId()+"}:events", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) < len(got) || stored[len(got)-1].ID != strconv.FormatUint(got[len(got)-1].GetSeq(), 10)+"-0" {
		t.Fatalf("the caller got %d events up to seq %d; the stored log has %d", len(got), got[len(got)-1].GetSeq(), len(stored))
	}
}
