package main

import (
	"bytes"
	"strings"
	"testing"
)

// The CLI's commands refuse what they do not take and answer -h with their
// usage on stdout, exit 0 (agentd classify took any flag; serve --help
// exited 2).
func TestCommandsFlagsAndHelp(t *testing.T) {
	for _, c := range []struct {
		args        []string
		stdin       string
		code        int
		out, errOut string
	}{
		{args: []string{"classify", "--bogus"}, code: 2, errOut: "flag provided but not defined: -bogus"},
		{args: []string{"classify", "errors.jsonl"}, code: 2, errOut: "the errors come on stdin"},
		{args: []string{"classify", "--help"}, code: 0, out: "Usage: agentd classify"},
		{args: []string{"classify", "-h"}, code: 0, out: "writes one verdict line each"},
		{args: []string{"classify"}, stdin: `{"message":"Overloaded","status":529}` + "\n", code: 0, out: `"class":"transient"`},
		{args: []string{"serve", "--help"}, code: 0, errOut: "-grpc-addr"},
		{args: []string{"serve", "extra"}, code: 2, errOut: `unexpected argument "extra"`},
		{args: []string{"version"}, code: 0, out: "agentd "},
		{args: []string{"--help"}, code: 0, out: "agentd version"},
	} {
		var out, errOut bytes.Buffer
		code := run(c.args, strings.NewReader(c.stdin), &out, &errOut)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errOut.String(), c.errOut) {
			t.Errorf("agentd %s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				strings.Join(c.args, " "), code, out.String(), errOut.String(), c.code, c.out, c.errOut)
		}
	}
}
