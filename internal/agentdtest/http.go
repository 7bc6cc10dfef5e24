package agentdtest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Do sends a request to the HTTP face (path from the root, e.g.
// "/v1/sessions"; body as JSON when not empty) and returns the response,
// whose body is closed when the test ends if the caller did not. A
// transport error fails the test.
func (a *Agentd) Do(ctx context.Context, t testing.TB, method, path, body string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, a.BaseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("agentdtest: %s %s: %v", method, path, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := a.HTTP.Do(req)
	if err != nil {
		t.Fatalf("agentdtest: %s %s: %v", method, path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// JSON sends a request as Do does and decodes the answer's JSON body into
// out (when not nil); it returns the status code.
func (a *Agentd) JSON(ctx context.Context, t testing.TB, method, path, body string, out any) int {
	t.Helper()
	resp := a.Do(ctx, t, method, path, body, nil)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("agentdtest: %s %s: reading the body: %v", method, path, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("agentdtest: %s %s: %s: %q is not JSON: %v", method, path, resp.Status, b, err)
		}
	}
	return resp.StatusCode
}

// Frame is one Server-Sent Events frame; Data is its data decoded as JSON
// (agentd's frames are JSON objects).
type Frame struct {
	ID, Event string
	Data      map[string]any
}

// SSE sends a request asking for text/event-stream (a prompt, an event
// stream) and reads its frames until stop returns true (nil: the stream's
// end). A status other than 200 fails the test.
func (a *Agentd) SSE(ctx context.Context, t testing.TB, method, path, body string, stop func(Frame) bool) []Frame {
	t.Helper()
	resp := a.Do(ctx, t, method, path, body, http.Header{"Accept": {"text/event-stream"}})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("agentdtest: %s %s: %s %s", method, path, resp.Status, b)
	}
	return ReadFrames(t, resp.Body, stop)
}

// ReadFrames reads SSE frames from body until stop returns true (nil:
// until the body ends); comments (": keep-alive") are skipped, a line
// that is not SSE fails the test.
func ReadFrames(t testing.TB, body io.Reader, stop func(Frame) bool) []Frame {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		frames []Frame
		cur    Frame
		data   strings.Builder
	)
	for sc.Scan() {
		line := sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if cur.Event == "" && data.Len() == 0 {
				continue
			}
			if err := json.Unmarshal([]byte(data.String()), &cur.Data); err != nil {
				t.Fatalf("agentdtest: frame data %q: %v", data.String(), err)
			}
			frames = append(frames, cur)
			if stop != nil && stop(cur) {
				return frames
			}
			cur, data = Frame{}, strings.Builder{}
		case field == "": // a comment
		case field == "id":
			cur.ID = value
		case field == "event":
			cur.Event = value
		case field == "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		case field == "retry": // a reconnection delay: not the test's business
		default:
			t.Fatalf("agentdtest: unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("agentdtest: reading the stream after %d frames: %v", len(frames), err)
	}
	return frames
}
