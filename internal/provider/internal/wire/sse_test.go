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
