package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `agentd mock-provider` serves the three wire formats and plays scripts.
func TestMockProviderCommand(t *testing.T) {
	bin := buildAgentd(t)
	cmd := exec.Command(bin, "mock-provider", "--listen", "127.0.0.1:0", "--tokens", "3", "--faults", "529,ok")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "mock provider listening on ")
	if !ok {
		t.Fatalf("first line %q", line)
	}
	go func() { done <- cmd.Wait() }()

	post := func(path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	if code, b := post("/v1/messages", body); code != 529 || !strings.Contains(b, "overloaded_error") {
		t.Fatalf("first call: %d %s", code, b)
	}
	code, b := post("/v1/messages", body)
	if code != 200 || strings.Count(b, "text_delta") != 3 || !strings.Contains(b, "event: message_stop") {
		t.Fatalf("second call: %d %s", code, b)
	}
	code, b = post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"chat [[faults: ok]]"}]}`)
	if code != 200 || !strings.Contains(b, "data: [DONE]") {
		t.Fatalf("chat: %d %s", code, b)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mock-provider did not stop on SIGTERM")
	}
}

func TestMockProviderFlags(t *testing.T) {
	for _, args := range [][]string{{"--faults", "nope"}, {"--delay-ms", "-1"}, {"extra"}, {"--tokens", "-3"}} {
		var out, errb bytes.Buffer
		if code := runMockProvider(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := runMockProvider([]string{"-h"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "X-Mock-Faults") {
		t.Errorf("-h: exit %d: %s", code, errb.String())
	}
}
