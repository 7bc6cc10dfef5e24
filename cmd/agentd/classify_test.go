package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

var classifyNow = time.Date(2025, 8, 21, 12, 40, 0, 0, time.UTC)

var reasonField = regexp.MustCompile(`,"reason":"(?:[^"\\]|\\.)*"}`)

func fixedNow() time.Time { return classifyNow }

func TestRunClassify(t *testing.T) {
	t.Parallel()
	longMsg := "socket hang up " + strings.Repeat("x", maxClassifyLine-100)
	longLine := `{"message":"` + longMsg + `"}`
	if len(longLine) > maxClassifyLine {
		t.Fatalf("test line too long: %d", len(longLine))
	}
	tooLong := `{"message":"` + strings.Repeat("y", maxClassifyLine) + `"}`

	cases := []struct {
		name string
		in   string
		want string
	}{
		{"empty input", "", ""},
		{"only blank lines", "\n \n\t\n", ""},
		{"contract example", `{"message": "rate limited", "status": 429, "headers": {"retry-after": "20"}, "api": "openai-responses", "code": "insufficient_quota", "stopReason": "error", "stopDetails": "", "observableOutput": false}`,
			`{"retryable":true,"class":"usage_limit","retryAfterMs":20000}`},
		{"transient with header hint", `{"message":"Overloaded","status":529,"type":"overloaded_error","headers":{"retry-after":"20"}}`,
			`{"retryable":true,"class":"transient","retryAfterMs":20000}`},
		{"transient without hint", `{"message":"read tcp 127.0.0.1:1234->1.2.3.4:443: read: connection reset by peer"}`,
			`{"retryable":true,"class":"transient"}`},
		{"hint from wording rounds up", `{"message":"Please try again in 9.8165s","status":429}`,
			`{"retryable":true,"class":"transient","retryAfterMs":9817}`},
		{"usage limit", `{"message":"You exceeded your current quota","status":429,"code":"insufficient_quota"}`,
			`{"retryable":true,"class":"usage_limit"}`},
		{"context overflow", `{"message":"prompt is too long: 205351 tokens > 200000 maximum","status":400}`,
			`{"retryable":false,"class":"context_overflow"}`},
		{"stale replay", `{"message":"Previous response with id 'resp_abc' not found.","api":"openai-responses","code":"previous_response_not_found"}`,
			`{"retryable":true,"class":"stale_replay"}`},
		{"stale reasoning: anthropic signature", `{"message":"400 invalid_request_error: messages.1.content.0: Invalid ` + "`signature`" + ` in ` + "`thinking`" + ` block","status":400,"type":"invalid_request_error","api":"anthropic"}`,
			`{"retryable":true,"class":"stale_replay"}`},
		{"stale reasoning: openai encrypted content", `{"message":"400 invalid_request_error: The encrypted content for item rs_1 could not be verified.","status":400,"code":"invalid_encrypted_content","api":"openai-responses"}`,
			`{"retryable":true,"class":"stale_replay"}`},
		{"refusal", `{"message":"Refusal (cyber): Classifier declined this turn.","stopDetails":"refusal","observableOutput":true}`,
			`{"retryable":true,"class":"refusal"}`},
		{"observable output", `{"message":"socket hang up","observableOutput":true}`,
			`{"retryable":false,"class":"not_retryable"}`},
		{"not retryable", `{"message":"invalid x-api-key","status":401,"type":"authentication_error"}`,
			`{"retryable":false,"class":"not_retryable"}`},
		{"stopReason defaults to error", `{"message":"Overloaded"}`, `{"retryable":true,"class":"transient"}`},
		{"explicit stopReason stop", `{"message":"Overloaded","stopReason":"stop"}`, `{"retryable":false,"class":"not_retryable"}`},
		{"aborted sentinel", `{"message":"Request was aborted","stopReason":"aborted"}`, `{"retryable":false,"class":"not_retryable"}`},
		{"empty message is present", `{"message":""}`, `{"retryable":false,"class":"not_retryable"}`},
		{"header as number", `{"message":"Overloaded","headers":{"retry-after-ms":1500}}`,
			`{"retryable":true,"class":"transient","retryAfterMs":1500}`},
		{"header as array", `{"message":"Overloaded","headers":{"Retry-After":["3","4"]}}`,
			`{"retryable":true,"class":"transient","retryAfterMs":3000}`},
		{"http date header uses now", `{"message":"Overloaded","headers":{"retry-after":"Thu, 21 Aug 2025 12:41:00 GMT"}}`,
			`{"retryable":true,"class":"transient","retryAfterMs":60000}`},
		{"hint of zero is reported", `{"message":"Overloaded","headers":{"retry-after":"0"}}`,
			`{"retryable":true,"class":"transient","retryAfterMs":0}`},
		{"crlf line endings", "{\"message\":\"Overloaded\"}\r\n{\"message\":\"invalid\"}\r\n",
			`{"retryable":true,"class":"transient"}` + "\n" + `{"retryable":false,"class":"not_retryable"}`},
		{"last line without newline", "{\"message\":\"Overloaded\"}\n{\"message\":\"socket hang up\"}",
			`{"retryable":true,"class":"transient"}` + "\n" + `{"retryable":true,"class":"transient"}`},
		{"malformed lines keep going", strings.Join([]string{
			`{"message":"Overloaded"}`,
			``,
			`{"message": "unterminated`,
			`{"status": 429}`,
			`{"message": null}`,
			`[1,2]`,
			`{"message":"x","stop_reason":"error"}`,
			`{"message":"x"} {"message":"y"}`,
			`{"message":"x","status":1000}`,
			`{"message":"x","status":"429"}`,
			`{"message":"x","headers":{"retry-after":{"a":1}}}`,
			`{"message":"socket hang up"}`,
		}, "\n"), strings.Join([]string{
			`{"retryable":true,"class":"transient"}`,
			`{"error":"line 3: invalid JSON: unexpected EOF"}`,
			`{"error":"line 4: missing \"message\""}`,
			`{"error":"line 5: missing \"message\""}`,
			`{"error":"line 6: invalid JSON: json: cannot unmarshal array into Go value of type main.classifyInput"}`,
			`{"error":"line 7: invalid JSON: json: unknown field \"stop_reason\""}`,
			`{"error":"line 8: invalid JSON: trailing data after the object"}`,
			`{"error":"line 9: status 1000 is not an HTTP status (100-599)"}`,
			`{"error":"line 10: invalid JSON: json: cannot unmarshal string into Go struct field classifyInput.status of type int"}`,
			`{"error":"line 11: invalid JSON: header value must be a string, a number or an array of them, got {\"a\":1}"}`,
			`{"retryable":true,"class":"transient"}`,
		}, "\n")},
		{"long line works", longLine + "\n" + `{"message":"Overloaded"}`,
			`{"retryable":true,"class":"transient"}` + "\n" + `{"retryable":true,"class":"transient"}`},
		{"too long line is an error, run goes on", tooLong + "\n" + `{"message":"Overloaded"}` + "\n",
			`{"error":"line 1: longer than 1048576 bytes"}` + "\n" + `{"retryable":true,"class":"transient"}`},
		{"too long last line", `{"message":"Overloaded"}` + "\n" + tooLong,
			`{"retryable":true,"class":"transient"}` + "\n" + `{"error":"line 2: longer than 1048576 bytes"}`},
		{"html characters not escaped", `{"message":"<b>x</b>"}`, `{"retryable":false,"class":"not_retryable"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := runClassify(strings.NewReader(tc.in), &out, fixedNow); err != nil {
				t.Fatalf("runClassify() error = %v", err)
			}
			want := tc.want
			if want != "" {
				want += "\n"
			}
			// The reason is for people; the table pins the verdicts.
			got := reasonField.ReplaceAllString(out.String(), "}")
			if got != want {
				t.Errorf("runClassify(%.200q) =\n%s\nwant\n%s", tc.in, got, want)
			}
			// every output line is one JSON object
			for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
				if l != "" && !json.Valid([]byte(l)) {
					t.Errorf("output line %q is not JSON", l)
				}
			}
		})
	}
}

// TestRunClassifySmallReads feeds the input one byte at a time, so lines
// cross every buffer boundary.
func TestRunClassifySmallReads(t *testing.T) {
	t.Parallel()
	in := strings.Repeat(`{"message":"Overloaded","headers":{"retry-after":"2"}}`+"\n", 50)
	var out bytes.Buffer
	if err := runClassify(iotest.OneByteReader(strings.NewReader(in)), &out, fixedNow); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat(`{"retryable":true,"class":"transient","retryAfterMs":2000,"reason":"text matches \"overloaded\""}`+"\n", 50)
	if out.String() != want {
		t.Errorf("got %q", out.String())
	}
}

func TestRunClassifyIOErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	t.Run("read error", func(t *testing.T) {
		var out bytes.Buffer
		r := iotest.DataErrReader(iotest.ErrReader(boom))
		err := runClassify(r, &out, fixedNow)
		if !errors.Is(err, boom) {
			t.Fatalf("runClassify() = %v, want wrapped %v", err, boom)
		}
	})
	t.Run("read error after a line", func(t *testing.T) {
		var out bytes.Buffer
		r := io.MultiReader(strings.NewReader(`{"message":"Overloaded"}`+"\n"), iotest.ErrReader(boom))
		err := runClassify(r, &out, fixedNow)
		if !errors.Is(err, boom) || reasonField.ReplaceAllString(out.String(), "}") != `{"retryable":true,"class":"transient"}`+"\n" {
			t.Fatalf("runClassify() = %v, out %q", err, out.String())
		}
	})
	t.Run("write error", func(t *testing.T) {
		err := runClassify(strings.NewReader(`{"message":"Overloaded"}`), failingWriter{boom}, fixedNow)
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "line 1") {
			t.Fatalf("runClassify() = %v, want wrapped %v naming line 1", err, boom)
		}
	})
	t.Run("nil clock", func(t *testing.T) {
		var out bytes.Buffer
		if err := runClassify(strings.NewReader(`{"message":"Overloaded"}`), &out, nil); err != nil {
			t.Fatal(err)
		}
	})
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// Stale reasoning state is a stale replay whose reason says so.
func TestRunClassifyStaleReasoning(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`{"message":"400 invalid_request_error: messages.1.content.0: Invalid ` + "`signature`" + ` in ` + "`thinking`" + ` block","status":400}`,
		`{"message":"400 invalid_request_error: messages.1.content.0.type: Expected ` + "`thinking`" + ` or ` + "`redacted_thinking`" + `, but found ` + "`text`" + `. When ` + "`thinking`" + ` is enabled, a final ` + "`assistant`" + ` message must start with a thinking block","status":400}`,
		`{"message":"The encrypted content gAAA...IQ== could not be verified. Reason: Encrypted content organization_id did not match the target organization.","status":400,"api":"openai-responses"}`,
	}, "\n")
	var out bytes.Buffer
	if err := runClassify(strings.NewReader(in), &out, fixedNow); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("output %q", out.String())
	}
	for i, l := range lines {
		var v classifyOutput
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		if !v.Retryable || v.Class != "stale_replay" || !strings.HasPrefix(v.Reason, "stale reasoning state: ") {
			t.Errorf("line %d: %s", i+1, l)
		}
	}
}
