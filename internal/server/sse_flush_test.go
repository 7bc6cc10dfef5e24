package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

// A burst of ready events goes out in one flush, not one per event: a
// replay of a finished prompt's events (all in the log before the request)
// arrives in a couple of HTTP chunks, where it was one chunk (one write
// syscall) per event. Each chunk boundary on the wire is a flush or a full
// buffer. The first frame, which goes with the header, is not flushed on
// its own either when more are ready: the first chunk holds several.
func TestSSEBurstIsFlushedOnce(t *testing.T) {
	ts := start(t, "")
	ctx := testkit.Context(t)
	id := webSession(t, ctx, ts.baseURL, "")
	promptSSE(t, ctx, ts.baseURL, id, "", `{"text":"one two three four five six seven eight"}`)

	conn, err := net.DialTimeout("tcp", ts.srv.HTTPAddr(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testTimeout))
	fmt.Fprintf(conn, "GET /v1/sessions/%s/events?afterSeq=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n", id)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || len(resp.TransferEncoding) == 0 {
		t.Fatalf("status %d, transfer encoding %v", resp.StatusCode, resp.TransferEncoding)
	}
	// Read the raw chunks (http.ReadResponse leaves the body unread; its
	// reader would decode them): size line, data, CRLF.
	var body strings.Builder
	chunks, firstFrames := 0, 0
	for !strings.Contains(body.String(), "event: prompt_end") {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d chunks: %v", chunks, err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil || n == 0 {
			t.Fatalf("chunk size %q: %v", line, err)
		}
		if _, err := io.CopyN(&body, br, n); err != nil {
			t.Fatal(err)
		}
		br.Discard(2)
		if chunks == 0 {
			firstFrames = strings.Count(body.String(), "event: ")
		}
		chunks++
	}
	frames := strings.Count(body.String(), "\nevent: ") + 1
	t.Logf("%d frames in %d chunks, %d in the first (%d bytes)", frames, chunks, firstFrames, body.Len())
	// Without a flush inside the burst, a chunk ends only where the
	// response's 2 KiB buffer is full, and once at the end.
	if most := body.Len()/2048 + 1; frames < 15 || chunks > most {
		t.Errorf("%d frames (%d bytes) in %d chunks: want a burst in at most %d (full 2 KiB buffers, then the rest)", frames, body.Len(), chunks, most)
	}
	if firstFrames < 2 {
		t.Errorf("the first chunk holds %d frames: the first frame was flushed alone while more were ready", firstFrames)
	}
}
