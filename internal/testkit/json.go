package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
)

// JSONTokens lists the JSON tokens of data as text ("!" and the error when
// it is not JSON), numbers as written: two encodings compare equal when
// their tokens do, whatever their spacing.
func JSONTokens(data []byte) []string {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var out []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			return append(out, "!"+err.Error())
		}
		out = append(out, fmt.Sprintf("%T:%v", tok, tok))
	}
}

// SameAsMarshal fails t unless encode writes json.Marshal's bytes of v, or
// refuses v with json.Marshal's error; direct reports whether the encoder
// wrote v itself, which it must not do for a v json.Marshal refuses (a
// hand-written encoder's fallback is json.Marshal).
func SameAsMarshal[T any](t testing.TB, name string, v *T, encode func(*T) ([]byte, error), direct func(*T) bool) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, err := encode(v)
	switch {
	case (err != nil) != (wantErr != nil):
		t.Errorf("%s: error %v, json.Marshal's %v", name, err, wantErr)
	case err != nil && err.Error() != wantErr.Error():
		t.Errorf("%s: error %q, json.Marshal's %q", name, err, wantErr)
	case !bytes.Equal(got, want):
		t.Errorf("%s:\n got %s\nwant %s", name, got, want)
	}
	if wantErr != nil && direct(v) {
		t.Errorf("%s: written without json.Marshal, which refuses it: %v", name, wantErr)
	}
}

// Odd is a string with everything json.Marshal escapes or replaces: quotes,
// backslashes, HTML's <, > and &, control characters, U+2028 and U+2029,
// and invalid UTF-8, among plain and multi-byte text.
const Odd = "q\"b\\s/ <a&b> \b\f\n\r\t \x00\x01\x1f\x7f é 世界 😀 \u2028\u2029 bad:\xff\xfe\xc3 end"

// EncodesInOneBuffer fails t unless encode writes v into one buffer taken
// at size(v) and never regrown, not more than a quarter (and 256 bytes)
// above what it holds: one allocation, bar -race, whose sync.Pool drops
// encoding/json's scanners at random.
func EncodesInOneBuffer[T any](t testing.TB, name string, v *T, encode func(*T) ([]byte, error), size func(*T) int) {
	t.Helper()
	b, err := encode(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if est := size(v); cap(b) != est {
		t.Errorf("%s: the buffer grew from %d bytes to %d for %d", name, est, cap(b), len(b))
	}
	if c := cap(b); c > len(b)*5/4+256 {
		t.Errorf("%s: a buffer of %d bytes for %d", name, c, len(b))
	}
	if n := testing.AllocsPerRun(20, func() { _, _ = encode(v) }); n != 1 && !Race {
		t.Errorf("%s (%d bytes): %.0f allocations, want 1", name, len(b), n)
	}
}
