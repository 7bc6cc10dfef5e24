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
