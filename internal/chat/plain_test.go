package chat

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var sessionIDRe = regexp.MustCompile(`ses_[a-z0-9]+`)

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("transcript differs from %s (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestPlainTranscript runs "agentd chat < prompts > log" against a real
// agentd with the simulated provider's fault scripts: retries that succeed,
// a refused prompt, a context overflow, the delay cap (a provider's hint,
// and a usage limit's estimate: fail-fast), a non-retryable
// error, a tool call answered by the next input line, retries that run out.
// The delays are the provider's hints (or the 10 ms base delay), so the
// transcript is stable: testdata/plain.golden.
func TestPlainTranscript(t *testing.T) {
	addr := startServer(t, "retry: {base_delay_ms: 10, max_retries: 3}\n")
	in := strings.Join([]string{
		"hello [[faults: 529,503:retry-after-ms=200,ok]]",
		"bad [[faults: nope]]",
		"",
		"over [[faults: overflow]]",
		"cap [[faults: 529:retry-after=600]]",
		"quota [[faults: usage]]",
		"auth [[faults: 401]]",
		"weather in Paris? [[tools: get_weather]]",
		"sunny, 21°C",
		"many [[faults: 529:retry-after-ms=50,529:retry-after-ms=50,529:retry-after-ms=50,529:retry-after-ms=50]]",
	}, "\n") + "\n"
	var out, errOut bytes.Buffer
	code := Run(testContext(t), Options{Addr: addr, Tools: []string{"get_weather"}}, strings.NewReader(in), &out, &errOut)
	if code != ExitOK {
		t.Fatalf("exit code %d, stderr: %s", code, errOut.String())
	}
	if errOut.Len() > 0 {
		t.Errorf("stderr: %s", errOut.String())
	}
	golden(t, "plain.golden", sessionIDRe.ReplaceAllString(out.String(), "ses_ID"))
}

// TestPlainFallback: with a fallback chain, the fallback notices.
func TestPlainFallback(t *testing.T) {
	addr := startServer(t,
		"retry: {base_delay_ms: 10, max_retries: 3, fallback_chains: {default: [sim/echo, sim/backup]}}\n")
	in := "refused [[faults: refusal,ok]]\n"
	var out, errOut bytes.Buffer
	if code := Run(testContext(t), Options{Addr: addr}, strings.NewReader(in), &out, &errOut); code != ExitOK {
		t.Fatalf("exit code %d, stderr: %s", code, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"Fallback: sim/echo -> sim/backup\n",
		"Fallback succeeded on sim/backup\n",
		"echo: refused\n",
		"[retry succeeded on attempt 1]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	golden(t, "plain_fallback.golden", sessionIDRe.ReplaceAllString(got, "ses_ID"))
}

// TestPlainExitCodes: EOF is success; an unreachable agentd or an unknown
// session is an error.
func TestPlainExitCodes(t *testing.T) {
	addr := startServer(t, testConfig)
	ctx := testContext(t)

	var out, errOut bytes.Buffer
	if code := Run(ctx, Options{Addr: addr}, strings.NewReader(""), &out, &errOut); code != ExitOK {
		t.Errorf("empty input: exit %d, stderr %s", code, errOut.String())
	}

	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	errOut.Reset()
	if code := Run(ctx, Options{Addr: dead}, strings.NewReader("hi\n"), io.Discard, &errOut); code != ExitError {
		t.Errorf("unreachable agentd: exit %d", code)
	}
	if !strings.Contains(errOut.String(), "cannot reach agentd at "+dead) {
		t.Errorf("unreachable agentd: stderr %q", errOut.String())
	}

	errOut.Reset()
	if code := Run(ctx, Options{Addr: addr, SessionID: "ses_nope"}, strings.NewReader("hi\n"), io.Discard, &errOut); code != ExitError {
		t.Errorf("unknown session: exit %d", code)
	}
	if !strings.Contains(errOut.String(), "ses_nope") {
		t.Errorf("unknown session: stderr %q", errOut.String())
	}
}

// TestPlainAttach attaches to a session with history and continues it.
func TestPlainAttach(t *testing.T) {
	addr := startServer(t, testConfig)
	ctx := testContext(t)
	var out, errOut bytes.Buffer
	if code := Run(ctx, Options{Addr: addr}, strings.NewReader("first [[faults: 503,ok]]\n"), &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	id := sessionIDRe.FindString(out.String())

	out.Reset()
	if code := Run(ctx, Options{Addr: addr, SessionID: id, History: 2}, strings.NewReader("second\n"), &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := "Session " + id + " (sim/echo), 3 history entries, idle\n" +
		"… the latest 2:\n" +
		"Error: 503 upstream connect error or disconnect/reset before headers. reset reason: connection failure\n" +
		"echo: first\n" +
		"---\n" +
		"> second\n" +
		"echo: second\n"
	if got := out.String(); got != want {
		t.Errorf("attached transcript:\n%s\nwant:\n%s", got, want)
	}
}

// notifyWriter calls fn once, when what it has been written contains s.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	s    string
	fn   func()
	done bool
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.s) {
		w.done = true
		w.fn()
	}
	return len(p), nil
}

// TestPlainResumesAfterLostConnection cuts the connection to agentd while a
// retry waits: the client reconnects, resumes the prompt's events after the
// last seq it printed, and prints every event exactly once.
func TestPlainResumesAfterLostConnection(t *testing.T) {
	addr := startServer(t, testConfig)
	px := startProxy(t, addr)
	out := &notifyWriter{s: "[retry 1/10", fn: px.cut}
	var errOut bytes.Buffer
	in := "resume [[faults: 529:retry-after-ms=300,ok]]\n"
	if code := Run(testContext(t), Options{Addr: px.addr()}, strings.NewReader(in), out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s\n%s", code, errOut.String(), out.buf.String())
	}
	got := out.buf.String()
	for _, want := range []string{"[retry 1/10 in 0.3s: 529 overloaded_error: Overloaded]\n", "[connection lost (", "echo: resume\n", "[retry succeeded on attempt 1]\n"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("output has %q %d times, want once:\n%s", want, strings.Count(got, want), got)
		}
	}
}

// TestPromptStreamResumes: after a lost stream the events are read again
// from the last delivered seq; the ones already delivered are skipped.
func TestPromptStreamResumes(t *testing.T) {
	api := newFakeAPI()
	evs := seq(evAgentStart(), evMessageStart("sim/echo"), evText("echo: "), evText("hi"), evMessageEnd("stop", "", "echo: hi"), evAgentEnd(), evPromptEnd("completed", ""))
	first := newFakeStream(evs[:3]...)
	first.err = errUnavailable
	close(first.events)
	api.prompts <- first
	// The resumed stream repeats seq 3, then goes on.
	second := newFakeStream(evs[2:]...)
	api.streamEvents <- second

	st := openPrompt(testContext(t), api, "ses_1", "hi")
	st.delay = noDelay
	defer st.Close()
	var got []uint64
	var notices []string
	for {
		it, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if it.Notice != "" {
			notices = append(notices, it.Notice)
			continue
		}
		got = append(got, it.Event.GetSeq())
	}
	if want := []uint64{1, 2, 3, 4, 5, 6, 7}; !equalSeqs(got, want) {
		t.Errorf("seqs %v, want %v", got, want)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "resuming after event 3") {
		t.Errorf("notices %q", notices)
	}
	if api.count("StreamEvents after 3") != 1 {
		t.Errorf("calls %q", api.calls)
	}
}

// TestPromptStreamGivesUp: when agentd stays away the stream fails after
// maxReconnects attempts; a prompt refused before it started is not resumed.
func TestPromptStreamGivesUp(t *testing.T) {
	api := newFakeAPI()
	first := newFakeStream(seq(evAgentStart())...)
	first.err = errUnavailable
	close(first.events)
	api.prompts <- first
	st := openPrompt(testContext(t), api, "ses_1", "hi")
	st.delay = noDelay
	defer st.Close()
	if _, err := st.Next(); err != nil {
		t.Fatal(err)
	}
	var err error
	for err == nil {
		_, err = st.Next()
	}
	if !fatal(err) || !strings.Contains(err.Error(), "5 reconnects failed") {
		t.Errorf("err = %v", err)
	}
	if n := api.count("StreamEvents"); n != maxReconnects {
		t.Errorf("%d reconnects, want %d", n, maxReconnects)
	}

	refused := newFakeStream()
	refused.err = errUnavailable
	close(refused.events)
	api.prompts <- refused
	st2 := openPrompt(testContext(t), api, "ses_1", "hi")
	defer st2.Close()
	if _, err := st2.Next(); err == nil || st2.Started() {
		t.Errorf("refused prompt: err %v, started %v", err, st2.Started())
	}
	if n := api.count("StreamEvents"); n != maxReconnects {
		t.Errorf("a prompt that never started was resumed")
	}
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPlainInterrupted: a signal while a prompt runs aborts it.
func TestPlainInterrupted(t *testing.T) {
	addr := startServer(t, testConfig)
	api := dialAPI(t, addr)
	ctx := testContext(t)
	s, err := api.CreateSession(ctx, &agentdv1.CreateSessionRequest{Model: "sim/echo"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	out := &notifyWriter{s: "> hang", fn: func() {}}
	// Interrupt once the prompt is running on the server.
	started := make(chan struct{})
	go func() {
		defer close(started)
		ev, err := api.StreamEvents(ctx, &agentdv1.StreamEventsRequest{SessionId: s.GetId()})
		if err != nil {
			return
		}
		for {
			e, err := ev.Recv()
			if err != nil || e.GetAgentStart() != nil {
				interrupt()
				return
			}
		}
	}()
	var errOut bytes.Buffer
	code := RunPlain(runCtx, api, s.GetId(), strings.NewReader("hang [[faults: hang]]\n"), out, &errOut)
	<-started
	if code != ExitInterrupted {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	// The prompt was aborted: the session is idle again.
	got, err := api.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: s.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != "idle" {
		t.Errorf("session %s after the interrupt", got.GetStatus())
	}
}

// TestPlainToken: with tokens configured, the token goes as a bearer token;
// without it agentd refuses the session.
func TestPlainToken(t *testing.T) {
	const token = "chat-test-token-0123456789"
	addr := startServer(t, testConfig+"auth: {tokens: [{token: "+token+", tenant: team-a}]}\n")
	ctx := testContext(t)
	var out, errOut bytes.Buffer
	if code := Run(ctx, Options{Addr: addr, Token: token}, strings.NewReader("hi\n"), &out, &errOut); code != ExitOK {
		t.Fatalf("with the token: exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "echo: hi\n") {
		t.Errorf("output:\n%s", out.String())
	}
	errOut.Reset()
	if code := Run(ctx, Options{Addr: addr}, strings.NewReader("hi\n"), io.Discard, &errOut); code != ExitError {
		t.Errorf("without the token: exit %d", code)
	}
	if !strings.Contains(errOut.String(), "agentd refused the token") {
		t.Errorf("without the token: stderr %q", errOut.String())
	}
}
