package wire

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSSEReader(t *testing.T) {
	in := ": comment\r\n" +
		"event: a\r\ndata: 1\r\n\r\n" +
		"data: x\ndata:y\n\n" +
		"event: nodata\n\n" +
		"id: 7\nretry: 10\ndata: z\n\n" +
		"event: cut\ndata: {\"partial\""
	r := newSSEReader(iotest.OneByteReader(strings.NewReader(in)))
	var got []string
	for {
		ev, err := r.next()
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("end: %v, want unexpected EOF", err)
			}
			break
		}
		got = append(got, ev.Type+"="+string(ev.Data))
	}
	if want := "a=1|=x\ny|=z"; strings.Join(got, "|") != want {
		t.Errorf("events %q, want %q", strings.Join(got, "|"), want)
	}

	r = newSSEReader(strings.NewReader("data: 1\n\n"))
	if _, err := r.next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.next(); !errors.Is(err, io.EOF) {
		t.Errorf("clean end: %v, want EOF", err)
	}

	r = newSSEReader(strings.NewReader("data: " + strings.Repeat("x", maxLine) + "\n\n"))
	if _, err := r.next(); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("overlong line: %v", err)
	}
}

// A released reader serves the next stream from its start: nothing of the
// first stream's unread bytes, event type or data is left, a line longer
// than the read buffer is read whole, and buffers grown past maxKeptData
// are not kept.
func TestSSEReaderReleasedServesTheNextStream(t *testing.T) {
	long := strings.Repeat("y", 3*readBuffer)
	for range 3 {
		r := newSSEReader(strings.NewReader("event: first\ndata: " + long + "\n\ndata: unread\n\n"))
		ev, err := r.next()
		if err != nil || ev.Type != "first" || string(ev.Data) != long {
			t.Fatalf("first stream: %q (%d bytes), %v", ev.Type, len(ev.Data), err)
		}
		r.release()

		r = newSSEReader(strings.NewReader("data: second\n\n"))
		ev, err = r.next()
		if err != nil || ev.Type != "" || string(ev.Data) != "second" {
			t.Fatalf("second stream: %q %q, %v", ev.Type, ev.Data, err)
		}
		if _, err := r.next(); !errors.Is(err, io.EOF) {
			t.Fatalf("second stream's end: %v, want EOF", err)
		}
		r.release()
	}
	r := newSSEReader(strings.NewReader("data: " + strings.Repeat("z", 2*maxKeptData) + "\n\n"))
	if _, err := r.next(); err != nil {
		t.Fatal(err)
	}
	// What release does before the pool has it (after, another test's
	// reader may be this one).
	r.reset()
	if cap(r.line) > maxKeptData || cap(r.data) > maxKeptData {
		t.Errorf("reset with buffers of %d and %d bytes, want ≤ %d", cap(r.line), cap(r.data), maxKeptData)
	}
	r.release()
}
