package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/retry"
)

// FuzzRunClassify feeds `agentd classify` any input: the fuzzed lines as
// they are, then one line built from fuzzed fields (so that every input
// reaches the classifier). Nothing panics; every non-blank input line gets
// one output line, in order, that is either {"error":"line N: …"} for that
// line's number or a verdict with a known class, retryable as the class
// says, and a non-negative retryAfterMs. A line's answer does not depend on
// the lines around it. Run it with
//
//	go test -run '^$' -fuzz '^FuzzRunClassify$' -fuzztime 10m ./cmd/agentd/
func FuzzRunClassify(f *testing.F) {
	for _, seed := range []string{
		"",
		"\n \n\t\n",
		`{"message": "rate limited", "status": 429, "headers": {"retry-after": "20"}, "api": "openai-responses", "code": "insufficient_quota", "stopReason": "error", "stopDetails": "", "observableOutput": false}`,
		`{"message":"Overloaded","status":529,"type":"overloaded_error","headers":{"retry-after":"20"}}`,
		`{"message":"Please try again in 9.8165s","status":429}`,
		`{"message":"prompt is too long: 205351 tokens > 200000 maximum","status":400}`,
		`{"message":"Previous response with id 'resp_abc' not found.","api":"openai-responses","code":"previous_response_not_found"}`,
		`{"message":"Refusal (cyber): Classifier declined this turn.","stopDetails":"refusal","observableOutput":true}`,
		`{"message":"Request was aborted","stopReason":"aborted"}`,
		`{"message":"Overloaded","headers":{"retry-after-ms":1500,"Retry-After":["3",4.5e300]}}`,
		`{"message":"Overloaded","headers":{"retry-after":"Thu, 21 Aug 2025 12:41:00 GMT"}}`,
		"{\"message\":\"Overloaded\"}\r\n{\"message\":\"invalid\"}\r\n",
		`{"message": "unterminated`,
		`{"status": 429}`,
		`[1,2]`,
		`{"message":"x"} {"message":"y"}`,
		`{"message":"x","status":1000}`,
		`{"message":"x","status":"429"}`,
		`{"message":"x","headers":{"retry-after":{"a":1}}}`,
		`{"message":"x","headers":{"retry-after":[[1]]}}`,
		`{"message":"\ud800 \u0000 <b>","reason":"x"}`,
		"{\"message\":\"\xff\xfe\"}",
		`{"message":"x","status":-0,"observableOutput":null}`,
		"\u00a0\n\u0085\n",
	} {
		f.Add(seed, "Overloaded", 529, "retry-after", "2")
	}
	f.Add("", "You exceeded your current quota", 429, "x-ratelimit-reset-tokens", "6m0s")
	f.Add("\n", "socket hang up", 0, "", "")
	f.Add("{}", "try again in 1e309s", 99, "Retry-After", "-1")

	f.Fuzz(func(t *testing.T, raw, message string, status int, headerName, headerValue string) {
		if len(raw) > 64<<10 {
			return // long lines only repeat what short ones reach
		}
		built, _ := json.Marshal(map[string]any{"message": message, "status": status, "headers": map[string]string{headerName: headerValue}})
		in := raw + "\n" + string(built)
		out := classify(t, in)

		lines := strings.Split(in, "\n")
		var want []int // the numbers of the lines that get an answer
		for i, l := range lines {
			if len(bytes.TrimSpace([]byte(strings.TrimSuffix(l, "\r")))) > 0 {
				want = append(want, i+1)
			}
		}
		if len(out) != len(want) {
			t.Fatalf("%q: %d answers for %d lines: %q", in, len(out), len(want), out)
		}
		for k, n := range want {
			checkClassifyAnswer(t, out[k], n)
			// Alone, the line gets the same answer (as line 1).
			alone := classify(t, lines[n-1])
			if len(alone) != 1 || alone[0] != strings.Replace(out[k], fmt.Sprintf(`{"error":"line %d: `, n), `{"error":"line 1: `, 1) {
				t.Fatalf("line %d %q: %q in the input, %q alone", n, lines[n-1], out[k], alone)
			}
		}
	})
}

// classify runs runClassify on in and returns its output lines.
func classify(t *testing.T, in string) []string {
	t.Helper()
	var out bytes.Buffer
	if err := runClassify(strings.NewReader(in), &out, fixedNow); err != nil {
		t.Fatalf("runClassify(%q): %v", in, err)
	}
	s := out.String()
	if s == "" {
		return nil
	}
	if !strings.HasSuffix(s, "\n") {
		t.Fatalf("runClassify(%q): output %q does not end with a newline", in, s)
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// checkClassifyAnswer checks one output line, the answer to input line n.
func checkClassifyAnswer(t *testing.T, line string, n int) {
	t.Helper()
	var e struct {
		Error *string `json:"error"`
	}
	var v struct {
		Retryable    *bool   `json:"retryable"`
		Class        *string `json:"class"`
		RetryAfterMs *int64  `json:"retryAfterMs"`
		Reason       string  `json:"reason"`
	}
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatalf("line %d: answer %q is not JSON: %v", n, line, err)
	}
	if e.Error != nil {
		if prefix := fmt.Sprintf("line %d: ", n); !strings.HasPrefix(*e.Error, prefix) || len(*e.Error) == len(prefix) {
			t.Fatalf("line %d: error %q does not name the line", n, *e.Error)
		}
		return
	}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || v.Retryable == nil || v.Class == nil {
		t.Fatalf("line %d: %q is not a verdict (%v)", n, line, err)
	}
	switch c := retry.Class(*v.Class); c {
	case retry.ClassTransient, retry.ClassUsageLimit, retry.ClassContextOverflow, retry.ClassStaleReplay, retry.ClassRefusal, retry.ClassNotRetryable:
		if *v.Retryable != c.Retryable() {
			t.Fatalf("line %d: %q: retryable %v for class %s", n, line, *v.Retryable, c)
		}
	default:
		t.Fatalf("line %d: %q: unknown class %q", n, line, *v.Class)
	}
	if v.RetryAfterMs != nil && (*v.RetryAfterMs < 0 || *v.RetryAfterMs > retry.MaxHint.Milliseconds()) {
		t.Fatalf("line %d: %q: retryAfterMs out of [0, %d]", n, line, retry.MaxHint.Milliseconds())
	}
}
