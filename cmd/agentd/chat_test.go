package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/config"
)

func TestChatFlags(t *testing.T) {
	for _, args := range [][]string{
		{"chat", "--session", "ses_1", "--model", "sim/echo"},
		{"chat", "--session", "ses_1", "--tool", "get_weather"},
		{"chat", "extra"},
		{"chat", "--bogus"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %s)", args, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"chat", "-h"}, strings.NewReader(""), &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "agentd chat [--addr ADDR]") {
		t.Errorf("-h: exit %d, %s", code, errOut.String())
	}
}

// TestChatCommand runs "agentd chat" (not a terminal: plain lines) against
// a real agentd.
func TestChatCommand(t *testing.T) {
	cfg, err := config.Parse(strings.NewReader("listen: {grpc: 127.0.0.1:0, http: 127.0.0.1:0}\nretry: {base_delay_ms: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("agentd did not stop")
		}
	}()

	t.Setenv("AGENTD_TOKEN", "") // no auth configured
	var out, errOut bytes.Buffer
	in := strings.NewReader("hi [[faults: 529,429:retry-after-ms=100,ok]]\n")
	if code := run([]string{"chat", "--addr", a.Server().GRPCAddr()}, in, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"> hi [[faults: 529,429:retry-after-ms=100,ok]]\n",
		"[retry 1/10 in 0.01s: 529 overloaded_error: Overloaded]\n",
		"[retry 2/10 in 0.1s: 429 rate_limit_error:",
		"echo: hi\n",
		"[retry succeeded on attempt 2]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
