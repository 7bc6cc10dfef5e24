package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/testkit"
)

// odd is a string with everything json.Marshal escapes or replaces.
const odd = testkit.Odd

func sameString(t *testing.T, s string) {
	t.Helper()
	want, _ := json.Marshal(s)
	if got := AppendString([]byte("x"), s); !bytes.Equal(got[1:], want) || got[0] != 'x' {
		t.Errorf("AppendString(%q) = %s, json.Marshal %s", s, got[1:], want)
	}
}

func sameRaw(t *testing.T, raw string) {
	t.Helper()
	want, wantErr := json.Marshal(json.RawMessage(raw))
	got, ok := AppendRaw([]byte("x"), json.RawMessage(raw))
	switch {
	case ok != (wantErr == nil):
		t.Errorf("AppendRaw(%q): ok %v, json.Marshal's error %v", raw, ok, wantErr)
	case ok && !bytes.Equal(got[1:], want):
		t.Errorf("AppendRaw(%q) = %s, json.Marshal %s", raw, got[1:], want)
	case !ok && string(got) != "x":
		t.Errorf("AppendRaw(%q) refused, but wrote %q", raw, got)
	}
}

func sameFloat(t *testing.T, f float64) {
	t.Helper()
	want, wantErr := json.Marshal(f)
	got, ok := AppendFloat(nil, f)
	if ok != (wantErr == nil) || ok && !bytes.Equal(got, want) {
		t.Errorf("AppendFloat(%v) = %s %v, json.Marshal %s %v", f, got, ok, want, wantErr)
	}
}

func TestAppendIsMarshal(t *testing.T) {
	for _, s := range []string{"", "plain", odd, "\u2028", "<>&", "\x7f\x80"} {
		sameString(t, s)
	}
	for _, raw := range []string{`{}`, ` { "a" : [1, 2, "<&>"] } `, `"\u2028"`, "\"\u2028\u2029\"", `{`, ``, `nul`, `[1,]`} {
		sameRaw(t, raw)
	}
	for _, f := range []float64{0, 1, -1.5e-9, 1e21, 1e20, 123456789.125, 1e-7, math.NaN(), math.Inf(1)} {
		sameFloat(t, f)
	}
}

// FuzzAppendIsMarshal holds the encoders' helpers to json.Marshal. Run it
// with
//
//	go test -run '^$' -fuzz '^FuzzAppendIsMarshal$' -fuzztime 2m ./internal/provider/internal/wire/
func FuzzAppendIsMarshal(f *testing.F) {
	f.Add(odd, ` [1, "<&>", {"a" : null}] `, 0.5)
	f.Add("", `{`, math.Inf(1))
	f.Fuzz(func(t *testing.T, s, raw string, x float64) {
		sameString(t, s)
		sameRaw(t, raw)
		sameFloat(t, x)
	})
}

// BenchmarkAppendString: a model's answer, plain and with escapes, against
// json.Marshal of the same string.
func BenchmarkAppendString(b *testing.B) {
	for name, s := range map[string]string{
		"plain":   strings.Repeat("The answer is forty-two, as computed. ", 100),
		"escapes": strings.Repeat("line \"one\"\n\tsaid <b> & é 世界\n", 100),
	} {
		b.Run(name+"/AppendString", func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			buf := make([]byte, 0, 2*len(s))
			for b.Loop() {
				buf = AppendString(buf[:0], s)
			}
		})
		b.Run(name+"/json.Marshal", func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				_, _ = json.Marshal(s)
			}
		})
	}
}

// plainWordsByBytes is PlainWords a byte at a time: the reference.
func plainWordsByBytes(s string) int {
	n := 0
	for ; n < len(s) && s[n] >= 0x20 && s[n] < 0x80 && s[n] != '"' && s[n] != '\\'; n++ {
	}
	return n - n%8
}

// PlainWords stops at the word of the first byte a JSON string cannot hold
// as it is, whichever byte of the word it is and whatever the others are
// (the word test's borrows and carries): every byte value at every place
// of a word, after plain words and after none; then random strings.
func TestPlainWords(t *testing.T) {
	for c := range 256 {
		for at := range 8 {
			for _, lead := range []string{"", "abcdefgh", "~~~~~~~~ !#$%&'("} {
				w := []byte("0123456789abcdef")
				w[at] = byte(c)
				s := lead + string(w)
				if got, want := PlainWords(s), plainWordsByBytes(s); got != want {
					t.Fatalf("PlainWords(%q) = %d, want %d", s, got, want)
				}
				if got, want := PlainWords([]byte(s)), plainWordsByBytes(s); got != want {
					t.Fatalf("PlainWords([]byte(%q)) = %d, want %d", s, got, want)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("ab \"\\\x00\x1f\x20\x7e\x7f\x80\xff\xc3\xa9/<>&")
	for range 20000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			if rng.IntN(6) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = 'a' + byte(rng.IntN(26))
			}
		}
		if got, want := PlainWords(string(b)), plainWordsByBytes(string(b)); got != want {
			t.Fatalf("PlainWords(%q) = %d, want %d", b, got, want)
		}
	}
}
