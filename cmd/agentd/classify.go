package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agentd/agentd/internal/retry"
)

// maxClassifyLine is the longest input line `agentd classify` accepts (1 MiB,
// line ending excluded). A longer line gets an error line of its own and the
// run goes on with the next line.
const maxClassifyLine = 1 << 20

// classifyInput is one input line of `agentd classify` (the CLI contract,
// README "agentd classify"). Only
// message is required; stopReason defaults to "error". Unknown fields are
// errors, so that a misspelt field ("stop_reason") is not silently ignored.
type classifyInput struct {
	Message          *string                 `json:"message"`
	Status           int                     `json:"status"`
	Headers          map[string]headerValues `json:"headers"`
	API              string                  `json:"api"`
	Code             string                  `json:"code"`
	Type             string                  `json:"type"`
	StopReason       string                  `json:"stopReason"`
	StopDetails      string                  `json:"stopDetails"`
	ObservableOutput bool                    `json:"observableOutput"`
	// Body is the provider's error body: a JSON string holding it, or the
	// body's JSON itself ({"error": {…, "details": [...]}}).
	Body json.RawMessage `json:"body"`
}

// classifyOutput is one verdict line. RetryAfterMs is present only when the
// provider gave a hint (headers or wording), rounded up to whole
// milliseconds.
type classifyOutput struct {
	Retryable    bool   `json:"retryable"`
	Class        string `json:"class"`
	RetryAfterMs *int64 `json:"retryAfterMs,omitempty"`
	// Reason says in a few words why (which signal decided).
	Reason string `json:"reason,omitempty"`
}

// classifyError is the line written for an input line that cannot be read.
type classifyError struct {
	Error string `json:"error"`
}

// headerValues is a header's value in the input: a string, a number
// ({"retry-after": 20}) or an array of them.
type headerValues []string

// UnmarshalJSON accepts a string, a number, or an array of strings and numbers.
func (h *headerValues) UnmarshalJSON(b []byte) error {
	var list []json.RawMessage
	if err := json.Unmarshal(b, &list); err != nil {
		list = []json.RawMessage{b}
	}
	vals := make(headerValues, 0, len(list))
	for _, raw := range list {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			vals = append(vals, s)
			continue
		}
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&n); err != nil {
			return fmt.Errorf("header value must be a string, a number or an array of them, got %s", raw)
		}
		vals = append(vals, n.String())
	}
	*h = vals
	return nil
}

// runClassify implements `agentd classify`: it reads one provider error per
// JSON line from in and writes one verdict per line to out, using the same
// classifier as the server (retry.Classify). Blank lines are skipped. A line
// that cannot be read (bad JSON, no message, an impossible status, longer
// than 1 MiB) writes {"error": "line N: ..."} and the run goes on. now
// supplies the clock for HTTP-date and epoch hints (time.Now when nil). It
// returns an error only when reading in or writing out fails.
func runClassify(in io.Reader, out io.Writer, now func() time.Time) error {
	if now == nil {
		now = time.Now
	}
	r := bufio.NewReaderSize(in, 64<<10)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for n := 1; ; n++ {
		line, tooLong, rerr := readLine(r, maxClassifyLine)
		var result any
		switch {
		case tooLong:
			result = classifyError{Error: fmt.Sprintf("line %d: longer than %d bytes", n, maxClassifyLine)}
		case len(bytes.TrimSpace(line)) == 0:
			// blank line (or the end of the input): nothing to classify
		default:
			result = classifyLine(n, line, now())
		}
		if result != nil {
			if err := enc.Encode(result); err != nil {
				return fmt.Errorf("write verdict for line %d: %w", n, err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("read line %d: %w", n, rerr)
		}
	}
}

// classifyLine decodes and classifies one non-blank input line.
func classifyLine(n int, line []byte, now time.Time) any {
	in, err := decodeClassifyInput(line)
	if err != nil {
		return classifyError{Error: fmt.Sprintf("line %d: %v", n, err)}
	}
	f := retry.Failure{
		StopReason:       in.StopReason,
		ErrorMessage:     *in.Message,
		StopDetails:      in.StopDetails,
		API:              in.API,
		Status:           in.Status,
		ErrorType:        in.Type,
		ErrorCode:        in.Code,
		ObservableOutput: in.ObservableOutput,
		Body:             bodyText(in.Body),
	}
	if f.StopReason == "" {
		f.StopReason = "error"
	}
	if len(in.Headers) > 0 {
		f.Headers = make(http.Header, len(in.Headers))
		for k, vs := range in.Headers {
			for _, v := range vs {
				f.Headers.Add(k, v)
			}
		}
	}
	v := retry.Classify(f, now)
	o := classifyOutput{Retryable: v.Retryable, Class: string(v.Class), Reason: v.Reason}
	if v.HasHint {
		ms := int64((v.Hint + time.Millisecond - 1) / time.Millisecond)
		o.RetryAfterMs = &ms
	}
	return o
}

// bodyText is the body input field's text: a JSON string's value, else the
// JSON as it is; "" for none or null.
func bodyText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

func decodeClassifyInput(line []byte) (classifyInput, error) {
	var in classifyInput
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return in, errors.New("invalid JSON: trailing data after the object")
	}
	if in.Message == nil {
		return in, errors.New(`missing "message"`)
	}
	if in.Status != 0 && (in.Status < 100 || in.Status > 599) {
		return in, fmt.Errorf("status %d is not an HTTP status (100-599)", in.Status)
	}
	return in, nil
}

// readLine reads one line (without its "\n" or "\r\n"). A line longer than
// max is consumed to its end and reported as tooLong with no data. err is
// io.EOF at the end of the input (line may still hold a last unterminated
// line) or the reader's error.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(frag) > max+2 { // room for "\r\n"
				tooLong, buf = true, nil
			} else {
				buf = append(buf, frag...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, true, err
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if len(buf) > max {
			return nil, true, err
		}
		return buf, false, err
	}
}
