package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/agentdtest"
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
	a := agentdtest.Start(t, "retry: {base_delay_ms: 10}\n")

	t.Setenv("AGENTD_TOKEN", "") // no auth configured
	var out, errOut bytes.Buffer
	in := strings.NewReader("hi [[faults: 529,429:retry-after-ms=100,ok]]\n")
	if code := run([]string{"chat", "--addr", a.GRPCAddr()}, in, &out, &errOut); code != 0 {
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
