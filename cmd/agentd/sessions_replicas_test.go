package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/redistest"
)

// Sessions shared by agentd processes through Redis: events followed and
// resumed on any replica, control calls forwarded to the replica running the
// prompt, prompts of a killed replica taken over, one prompt at a time per
// session across replicas.

// sharedSessionsConfig is every replica's configuration: a short lease so
// that a killed replica's prompts are taken over within about 1.5 s, and a
// paced simulated provider so that answers of [[tokens: N]] last N×10 ms.
func sharedSessionsConfig(redisAddr string) string {
	return fmt.Sprintf(`store: {backend: redis, redis: {addr: %s, key_prefix: "t1:", lease_ms: 1000}}
providers:
  - {name: sim, kind: simulated, token_delay_ms: 10}
`, redisAddr)
}

// node is a replica whose log is kept (and written to the test log when the
// test fails).
type node struct {
	*replica
	name string
	id   string // the replica id it logs

	mu   sync.Mutex
	logs bytes.Buffer
}

func (n *node) logText() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logs.String()
}

// startNode is startReplica keeping the replica's log lines.
func startNode(t *testing.T, bin, name, cfg string) *node {
	t.Helper()
	n := &node{name: name}
	// Registered before the replica's stop, so it runs after it: the log
	// then holds the shutdown too.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- replica %s (%s) log ----\n%s", n.name, n.id, n.logText())
		}
	})
	path := filepath.Join(t.TempDir(), "agentd.yaml")
	if err := os.WriteFile(path, []byte("listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\n"+cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", path, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.replica = &replica{cmd: cmd, done: make(chan struct{})}
	type serving struct{ HTTP, Replica, Store string }
	up := make(chan serving, 1)
	go func() {
		defer close(n.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			n.mu.Lock()
			n.logs.Write(sc.Bytes())
			n.logs.WriteByte('\n')
			n.mu.Unlock()
			var line struct {
				Msg string
				serving
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "agentd serving" {
				up <- line.serving
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		// After kill the signal fails (ignored) and done is closed.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-n.done
			t.Errorf("replica %s did not stop on SIGTERM", n.name)
		}
	})
	select {
	case s := <-up:
		n.http = "http://" + s.HTTP
		n.id = s.Replica
		if s.Store != "redis" || s.Replica == "" {
			t.Fatalf("replica %s serves with store %q, replica id %q; want redis and an id", name, s.Store, s.Replica)
		}
	case <-n.done:
		t.Fatalf("replica %s exited before serving:\n%s", name, n.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("replica %s did not start:\n%s", name, n.logText())
	}
	return n
}

// kill stops the replica with SIGKILL: no shutdown, no lease released.
func (n *node) kill(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill replica %s: %v", n.name, err)
	}
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("replica %s did not exit after SIGKILL", n.name)
	}
}

// logTakeovers writes the janitors' log lines of the live replicas to the
// test log: which replica took a lost prompt over, and how.
func logTakeovers(t *testing.T, nodes []*node) {
	t.Helper()
	for _, n := range nodes {
		for _, line := range strings.Split(n.logText(), "\n") {
			if strings.Contains(line, `"msg":"janitor`) {
				t.Logf("replica %s: %s", n.name, line)
			}
		}
	}
}

// startNodes starts a redis-server and n replicas named A, B, C…
func startNodes(t *testing.T, count int) []*node {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs agentd processes")
	}
	redis := redistest.Start(t)
	bin := buildAgentd(t)
	cfg := sharedSessionsConfig(redis.Addr())
	nodes := make([]*node, count)
	for i := range nodes {
		nodes[i] = startNode(t, bin, string(rune('A'+i)), cfg)
	}
	return nodes
}

// sessionJSON is a Session as the REST API renders it.
type sessionJSON struct {
	ID           string
	Status       string
	IsRetrying   bool
	RetryAttempt int
	LastSeq      string
	MessageCount int
}

func (n *node) createSession(t *testing.T) string {
	t.Helper()
	var s sessionJSON
	if err := json.Unmarshal(n.post(t, "/v1/sessions", `{"model":"sim/echo"}`), &s); err != nil || s.ID == "" {
		t.Fatalf("create session on %s: %v (%+v)", n.name, err, s)
	}
	return s.ID
}

func (n *node) session(t *testing.T, id string) sessionJSON {
	t.Helper()
	var s sessionJSON
	n.get(t, "/v1/sessions/"+id, &s)
	if s.ID != id {
		t.Fatalf("GET session %s on %s = %+v", id, n.name, s)
	}
	return s
}

// startPrompt starts a prompt without following it (?stream=false); it
// returns the seq before the prompt's first event.
func (n *node) startPrompt(t *testing.T, id, text string) uint64 {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	var started struct{ SessionID, PromptID, AfterSeq string }
	if err := json.Unmarshal(n.post(t, "/v1/sessions/"+id+":prompt?stream=false", string(body)), &started); err != nil {
		t.Fatal(err)
	}
	after, err := strconv.ParseUint(started.AfterSeq, 10, 64)
	if err != nil || started.PromptID == "" {
		t.Fatalf("prompt start on %s = %+v", n.name, started)
	}
	return after
}

// event is one event of a stream.
type event struct {
	Seq  uint64
	Type string
	M    map[string]any
}

func (e event) payload(field string) map[string]any {
	p, _ := e.M[field].(map[string]any)
	return p
}

func (e event) String() string { return fmt.Sprintf("%d:%s", e.Seq, e.Type) }

// stamp is the time agentd stamped e with.
func stamp(t *testing.T, e event) time.Time {
	t.Helper()
	v, _ := e.M["time"].(string)
	ts, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatalf("event %v: time %q: %v", e, v, err)
	}
	return ts
}

func parseEvent(data []byte) (event, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return event{}, err
	}
	seqStr, _ := m["seq"].(string)
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		return event{}, fmt.Errorf("event %s: seq: %v", data, err)
	}
	typ, _ := m["type"].(string)
	return event{Seq: seq, Type: typ, M: m}, nil
}

// stream is an open event stream (SSE, or a prompt's NDJSON answer), read
// by a goroutine of its own; the test takes events with bounded waits.
type stream struct {
	name   string
	events chan event
	err    error   // why the stream ended; read after events is closed
	seen   []event // the events taken so far
	ended  bool
}

// openStream sends req and reads its answer's events in a goroutine: SSE
// frames, or the NDJSON lines of a streaming RPC. It does not wait for the
// response: an SSE response on a session with no events yet only starts
// with its first event or heartbeat. An HTTP error ends the stream.
func openStream(t *testing.T, name string, req *http.Request, cancel context.CancelFunc, sse bool) *stream {
	s := &stream{name: name, events: make(chan event, 4096)}
	t.Cleanup(cancel)
	go func() {
		defer close(s.events)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			s.err = err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			s.err = fmt.Errorf("HTTP %d %s", resp.StatusCode, b)
			return
		}
		if sse {
			s.err = readSSE(resp.Body, s.events)
		} else {
			s.err = readNDJSON(resp.Body, s.events)
		}
	}()
	return s
}

func readSSE(r io.Reader, out chan<- event) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var typ, id string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) == 0 {
				typ, id = "", ""
				continue
			}
			payload := strings.Join(data, "\n")
			if typ == "error" {
				return fmt.Errorf("event: error %s", payload)
			}
			ev, err := parseEvent([]byte(payload))
			if err != nil {
				return err
			}
			if ev.Type != typ || strconv.FormatUint(ev.Seq, 10) != id {
				return fmt.Errorf("SSE frame id %q event %q carries event %v", id, typ, ev)
			}
			out <- ev
			typ, id, data = "", "", nil
		case strings.HasPrefix(line, ":"):
			// A heartbeat.
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		default:
			return fmt.Errorf("unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}

func readNDJSON(r io.Reader, out chan<- event) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var chunk struct {
			Result json.RawMessage
			Error  json.RawMessage
		}
		if err := json.Unmarshal(sc.Bytes(), &chunk); err != nil {
			return fmt.Errorf("line %q: %v", sc.Text(), err)
		}
		if chunk.Error != nil {
			return fmt.Errorf("stream error %s", chunk.Error)
		}
		ev, err := parseEvent(chunk.Result)
		if err != nil {
			return err
		}
		out <- ev
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}

// follow opens GET /v1/sessions/{id}/events over SSE, resuming after
// lastEventID (Last-Event-ID) when it is not 0.
func (n *node) follow(t *testing.T, id string, lastEventID uint64) *stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.http+"/v1/sessions/"+id+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(lastEventID, 10))
	}
	return openStream(t, "SSE on "+n.name, req, cancel, true)
}

// promptStream posts a streaming prompt and waits for the response. On an
// HTTP error it returns nil and the status and body.
func (n *node) promptStream(t *testing.T, id, text string) (*stream, int, string) {
	body, _ := json.Marshal(map[string]string{"text": text})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.http+"/v1/sessions/"+id+":prompt", bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // closed below, or by the reading goroutine
	if err != nil {
		cancel()
		return nil, 0, err.Error()
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, string(b)
	}
	s := &stream{name: "prompt on " + n.name, events: make(chan event, 4096)}
	t.Cleanup(cancel)
	go func() {
		defer close(s.events)
		defer resp.Body.Close()
		s.err = readNDJSON(resp.Body, s.events)
	}()
	return s, http.StatusOK, ""
}

// next takes the stream's next event, waiting at most until deadline; ok is
// false when the stream ended or the deadline passed.
func (s *stream) next(deadline time.Time) (event, bool) {
	if s.ended {
		return event{}, false
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case ev, ok := <-s.events:
		if !ok {
			s.ended = true
			return event{}, false
		}
		s.seen = append(s.seen, ev)
		return ev, true
	case <-timer.C:
		return event{}, false
	}
}

// waitFor takes events until one of type typ, within d; it fails the test
// when the stream ends or d passes first.
func (s *stream) waitFor(t *testing.T, typ string, d time.Duration) event {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ev, ok := s.next(deadline)
		if ok && ev.Type == typ {
			return ev
		}
		if !ok {
			why := fmt.Sprintf("no %s within %v", typ, d)
			if s.ended {
				why = fmt.Sprintf("the stream ended (%v) before a %s", s.err, typ)
			}
			t.Fatalf("%s: %s; events seen: %s", s.name, why, summarize(s.seen))
		}
	}
}

// since is the events taken from index i on.
func (s *stream) since(i int) []event { return s.seen[i:] }

// summarize lists events compactly (message_update runs are counted).
func summarize(evs []event) string {
	var b strings.Builder
	for i := 0; i < len(evs); i++ {
		e := evs[i]
		if i > 0 {
			b.WriteString(" ")
		}
		if e.Type == "message_update" {
			j := i
			for j+1 < len(evs) && evs[j+1].Type == "message_update" {
				j++
			}
			if j > i {
				fmt.Fprintf(&b, "%d..%d:message_update×%d", e.Seq, evs[j].Seq, j-i+1)
				i = j
				continue
			}
		}
		b.WriteString(e.String())
		switch e.Type {
		case "prompt_end", "auto_retry_end", "auto_retry_start", "message_end":
			p := map[string]any{}
			for k, v := range e.payload(camel(e.Type)) {
				if k != "text" {
					p[k] = v
				}
			}
			js, _ := json.Marshal(p)
			b.Write(js)
		}
	}
	return b.String()
}

// camel is the JSON name of an event type's payload field.
func camel(typ string) string {
	parts := strings.Split(typ, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}

// samePrompt fails unless every event of evs belongs to one prompt.
func samePrompt(t *testing.T, what string, evs []event) {
	t.Helper()
	if len(evs) == 0 {
		return
	}
	want, _ := evs[0].M["promptId"].(string)
	for _, e := range evs {
		if id, _ := e.M["promptId"].(string); id != want || id == "" {
			t.Errorf("%s: event %v has promptId %q, the first event %q", what, e, id, want)
		}
	}
}

// checkConsecutive fails unless evs carry the seqs from, from+1, …
func checkConsecutive(t *testing.T, what string, evs []event, from uint64) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != from+uint64(i) {
			t.Fatalf("%s: event %d has seq %d, want %d (lost or duplicated events): %s", what, i, e.Seq, from+uint64(i), summarize(evs))
		}
	}
}

// 1. A prompt started on B of a session created on A, followed over SSE on C
// while it runs; A resumes the stream from the middle with Last-Event-ID and
// serves exactly the rest; every replica then agrees on the session.
func TestSharedSessionEventsAcrossReplicas(t *testing.T) {
	nodes := startNodes(t, 3)
	a, b, c := nodes[0], nodes[1], nodes[2]

	id := a.createSession(t)
	sc := c.follow(t, id, 0)
	const text = "tell me [[tokens: 40]]"
	after := b.startPrompt(t, id, text)
	end := sc.waitFor(t, "prompt_end", 15*time.Second)
	if p := end.payload("promptEnd"); p["outcome"] != "completed" {
		t.Fatalf("prompt_end on C = %v; events: %s", p, summarize(sc.seen))
	}
	// C started following before the prompt: it saw every event of it.
	evs := sc.seen
	if len(evs) == 0 || evs[0].Seq != after+1 {
		t.Fatalf("C's first event is not seq %d (afterSeq of the prompt start): %s", after+1, summarize(evs))
	}
	checkConsecutive(t, "C's stream", evs, after+1)
	var updates int
	for _, e := range evs {
		if e.Type == "message_update" {
			updates++
		}
	}
	if updates < 10 || evs[0].Type != "agent_start" {
		t.Fatalf("C's stream is not a whole streamed prompt: %s", summarize(evs))
	}

	// Resume on A from the middle.
	mid := len(evs) / 2
	sa := a.follow(t, id, evs[mid].Seq)
	sa.waitFor(t, "prompt_end", 10*time.Second)
	want, got := evs[mid+1:], sa.seen
	if len(got) != len(want) {
		t.Fatalf("A resumed after seq %d with %d events, C saw %d after it:\nA: %s\nC: %s",
			evs[mid].Seq, len(got), len(want), summarize(got), summarize(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].Type != want[i].Type {
			t.Fatalf("A's event %d is %v, C saw %v:\nA: %s\nC: %s", i, got[i], want[i], summarize(got), summarize(want))
		}
		if got[i].Type == "message_update" {
			ga, _ := json.Marshal(got[i].payload("messageUpdate"))
			wc, _ := json.Marshal(want[i].payload("messageUpdate"))
			if !bytes.Equal(ga, wc) {
				t.Fatalf("seq %d: A's message_update %s, C's %s", got[i].Seq, ga, wc)
			}
		}
	}

	// Every replica agrees: idle, same last seq.
	wantSeq := strconv.FormatUint(end.Seq, 10)
	for _, n := range nodes {
		s := n.session(t, id)
		if s.Status != "idle" || s.IsRetrying || s.LastSeq != wantSeq {
			t.Errorf("GET session on %s = %+v; want status idle, lastSeq %s", n.name, s, wantSeq)
		}
	}

	var msgs struct {
		Messages []struct {
			Role       string
			StopReason string
			Content    []struct{ Type, Text string }
		}
	}
	c.get(t, "/v1/sessions/"+id+"/messages", &msgs)
	if len(msgs.Messages) != 2 || msgs.Messages[0].Role != "user" || msgs.Messages[1].Role != "assistant" {
		t.Fatalf("messages on C = %+v; want the user and the assistant message", msgs)
	}
	if u := msgs.Messages[0]; len(u.Content) == 0 || !strings.Contains(u.Content[0].Text, "tell me") {
		t.Errorf("user message on C = %+v", u)
	}
	if as := msgs.Messages[1]; as.StopReason != "stop" || len(as.Content) == 0 || len(strings.Fields(as.Content[0].Text)) < 40 {
		t.Errorf("assistant message on C = %+v", as)
	}
}

// 2. AbortRetry sent to a replica that does not run the prompt cancels the
// owner's backoff at once.
func TestSharedSessionAbortRetryOnOtherReplica(t *testing.T) {
	nodes := startNodes(t, 2)
	a, b := nodes[0], nodes[1]

	id := a.createSession(t)
	sa, code, body := a.promptStream(t, id, "hi [[faults: 529:retry-after=60,ok]]")
	if sa == nil {
		t.Fatalf("prompt on A = %d %s", code, body)
	}
	st := sa.waitFor(t, "auto_retry_start", 10*time.Second)
	if d := st.payload("autoRetryStart")["delayMs"]; d != "60000" {
		t.Errorf("auto_retry_start delayMs = %v, want 60000", d)
	}
	if s := b.session(t, id); !s.IsRetrying || s.RetryAttempt != 1 {
		t.Errorf("GET session on B during the backoff = %+v; want isRetrying, retryAttempt 1", s)
	}
	start := time.Now()
	b.post(t, "/v1/sessions/"+id+":abortRetry", "{}")
	re := sa.waitFor(t, "auto_retry_end", 5*time.Second)
	if p := re.payload("autoRetryEnd"); p["success"] == true || p["finalError"] != "Retry cancelled" {
		t.Errorf("auto_retry_end = %v; want success false, finalError \"Retry cancelled\"", p)
	}
	pe := sa.waitFor(t, "prompt_end", 5*time.Second)
	if p := pe.payload("promptEnd"); p["outcome"] != "aborted" {
		t.Errorf("prompt_end = %v; want outcome aborted", p)
	}
	t.Logf("abortRetry on B ended A's prompt in %v", time.Since(start))
	if s := b.session(t, id); s.IsRetrying {
		t.Errorf("GET session on B after the abort = %+v", s)
	}
}

// 3. The owner is killed while its prompt waits in backoff: another replica
// resumes the retry at its due time.
func TestSharedSessionRetryResumedAfterOwnerKilled(t *testing.T) {
	nodes := startNodes(t, 3)
	a, b := nodes[0], nodes[1]

	id := a.createSession(t)
	sb := b.follow(t, id, 0)
	a.startPrompt(t, id, "hi [[faults: 529:retry-after=4,ok]]")
	st := sb.waitFor(t, "auto_retry_start", 10*time.Second)
	if d := st.payload("autoRetryStart")["delayMs"]; d != "4000" {
		t.Errorf("auto_retry_start delayMs = %v, want 4000", d)
	}
	a.kill(t)
	from := len(sb.seen)
	pe := sb.waitFor(t, "prompt_end", 15*time.Second)
	rest := sb.since(from)
	if p := pe.payload("promptEnd"); p["outcome"] != "completed" {
		t.Fatalf("prompt_end on B = %v; events after the kill: %s", p, summarize(rest))
	}
	var start, end *event
	for i := range rest {
		switch rest[i].Type {
		case "message_start":
			start = &rest[i]
		case "message_end":
			end = &rest[i]
		}
	}
	if start == nil || end == nil || end.Seq < start.Seq {
		t.Fatalf("no message_start … message_end after the kill: %s", summarize(rest))
	}
	if r := end.payload("messageEnd")["stopReason"]; r != "stop" {
		t.Errorf("message_end stopReason = %v; events: %s", r, summarize(rest))
	}
	checkConsecutive(t, "B's stream after the kill", rest, sb.seen[from-1].Seq+1)
	t.Logf("B's events: %s", summarize(sb.seen))
	samePrompt(t, "B's stream", sb.seen)
	logTakeovers(t, nodes[1:])
	// Resumed at its due time, not at once on take-over: by the events' own
	// stamps (both replicas run on this machine's clock), not by their
	// arrival here, which a busy machine delays.
	if el := stamp(t, *start).Sub(stamp(t, st)); el < 4*time.Second-50*time.Millisecond {
		t.Errorf("the retried call started %v after auto_retry_start, before its 4 s delay", el)
	}

	sp, code, body := b.promptStream(t, id, "again")
	if sp == nil {
		t.Fatalf("new prompt on B = %d %s", code, body)
	}
	if p := sp.waitFor(t, "prompt_end", 10*time.Second).payload("promptEnd"); p["outcome"] != "completed" {
		t.Fatalf("new prompt on B: prompt_end %v; events: %s", p, summarize(sp.seen))
	}
}

// 4. The owner is killed while it streams an answer: the prompt ends with
// "owner replica lost", and the session goes on on another replica.
func TestSharedSessionStreamFailsAfterOwnerKilled(t *testing.T) {
	nodes := startNodes(t, 3)
	a, b := nodes[0], nodes[1]

	id := a.createSession(t)
	sb := b.follow(t, id, 0)
	a.startPrompt(t, id, "long [[tokens: 1000]]")
	for range 5 {
		sb.waitFor(t, "message_update", 10*time.Second)
	}
	a.kill(t)
	killed := time.Now()
	from := len(sb.seen)
	pe := sb.waitFor(t, "prompt_end", 8*time.Second)
	if p := pe.payload("promptEnd"); p["outcome"] != "failed" || p["error"] != "owner replica lost" {
		t.Fatalf("prompt_end on B = %v; want failed, \"owner replica lost\"; events after the kill: %s", p, summarize(sb.since(from)))
	}
	t.Logf("prompt_end %v after the kill; events after it: %s", time.Since(killed), summarize(sb.since(from)))
	samePrompt(t, "B's stream", sb.seen)
	logTakeovers(t, nodes[1:])

	sp, code, body := b.promptStream(t, id, "again")
	if sp == nil {
		t.Fatalf("new prompt on B = %d %s", code, body)
	}
	if p := sp.waitFor(t, "prompt_end", 10*time.Second).payload("promptEnd"); p["outcome"] != "completed" {
		t.Fatalf("new prompt on B: prompt_end %v; events: %s", p, summarize(sp.seen))
	}
	if s := b.session(t, id); s.Status != "idle" {
		t.Errorf("GET session on B after the new prompt = %+v", s)
	}
}

// 5. Prompts fired at once at one session from two replicas: one runs, the
// others are refused with FAILED_PRECONDITION.
func TestSharedSessionConcurrentPrompts(t *testing.T) {
	nodes := startNodes(t, 2)
	a, b := nodes[0], nodes[1]

	id := a.createSession(t)
	const n = 10
	for round := range 3 {
		type result struct {
			node   string
			code   int
			body   string
			events []event
			err    error
		}
		results := make([]result, n)
		var wg sync.WaitGroup
		fire := make(chan struct{})
		for i := range n {
			r := a
			if i%2 == 1 {
				r = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-fire
				res := result{node: r.name}
				s, code, body := r.promptStream(t, id, fmt.Sprintf("round %d prompt %d [[tokens: 60]]", round, i))
				res.code, res.body = code, body
				if s != nil {
					deadline := time.Now().Add(15 * time.Second)
					for {
						ev, ok := s.next(deadline)
						if !ok {
							break
						}
						res.events = append(res.events, ev)
					}
					if !s.ended {
						res.err = fmt.Errorf("the prompt's stream did not end within 15s")
					} else if !errors.Is(s.err, io.EOF) {
						res.err = s.err
					}
				}
				results[i] = res
			}()
		}
		close(fire)
		wg.Wait()

		var winners int
		for i, res := range results {
			switch res.code {
			case http.StatusOK:
				winners++
				last := event{}
				if len(res.events) > 0 {
					last = res.events[len(res.events)-1]
				}
				if res.err != nil || last.Type != "prompt_end" || last.payload("promptEnd")["outcome"] != "completed" {
					t.Errorf("round %d prompt %d on %s: 200, stream ended with %v: %s", round, i, res.node, res.err, summarize(res.events))
				}
			case http.StatusBadRequest:
				var e struct {
					Code    int
					Message string
					Error   *struct {
						Code    int
						Message string
					}
				}
				_ = json.Unmarshal([]byte(res.body), &e)
				if e.Error != nil {
					e.Code, e.Message = e.Error.Code, e.Error.Message
				}
				if e.Code != 9 || !strings.Contains(e.Message, "a prompt is running") {
					t.Errorf("round %d prompt %d on %s: 400 %s; want code 9 (FAILED_PRECONDITION), \"a prompt is running\"", round, i, res.node, res.body)
				}
			default:
				t.Errorf("round %d prompt %d on %s: %d %s", round, i, res.node, res.code, res.body)
			}
		}
		if winners != 1 {
			t.Errorf("round %d: %d prompts ran, want exactly 1", round, winners)
			for i, res := range results {
				t.Logf("round %d prompt %d on %s: %d %s %s", round, i, res.node, res.code, strings.TrimSpace(res.body), summarize(res.events))
			}
		}
		if t.Failed() {
			return
		}
	}
	var msgs struct{ Messages []struct{ Role string } }
	b.get(t, "/v1/sessions/"+id+"/messages", &msgs)
	if len(msgs.Messages) != 6 {
		t.Errorf("messages after 3 rounds = %+v; want 3 user and 3 assistant messages", msgs)
	}
}
