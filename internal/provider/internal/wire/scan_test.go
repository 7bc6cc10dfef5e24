package wire

import (
	"encoding/json"
	"testing"
)

// scanSeeds are strings, numbers and values with the escapes, unicode and
// malformations the scanner must get exactly right.
var scanSeeds = []string{
	`"Hello"`, `""`, `" world"`, `"a\nb"`, `"say \"hi\""`, `"back\\slash"`, `"\/\b\f\n\r\t"`,
	`"caf\u00e9"`, `"\u20ac"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\u0041"`,
	`"\ud83d\ud83d\ude00"`, `"\uDBFF\uDFFF"`, `"\u0000"`, `"\u00"`, `"\uZZZZ"`, `"\x"`, `"\'"`,
	"\"caf\xc3\xa9\"", "\"bad \xff byte\"", "\"\xed\xa0\x80\"", "\"\xef\xbf\xbd\"", "\"cut \xe2\x82\"",
	"\"tab\there\"", "\"nl\nhere\"", `"unterminated`, `"\`, `"日本語 テキスト"`,
	`0`, `-0`, `7`, `-12`, `01`, `1.5`, `1e3`, `123456789012345678`, `1234567890123456789`, `-`, `+1`,
	`null`, `true`, `false`, ` true `, `truex`, `fals`, `nul`, `[]`, `{}`, `[1,"a",{"b":null}]`, `{"a":[1,2,{"c":"d"}]}`, `[1,]`,
	`{"a":1,}`, `{"a" 1}`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	` "padded" `, `1.`, `.5`, `-1.5e+10`, `2E-3`,
	// Plain runs a word long and more, ended by each kind of byte at each
	// place of a word (String passes plain words at a time).
	`"abcdefgh"`, `"abcdefghijklmnop"`, `"abcdefg\n"`, `"abcdefgh\n"`, `"abcdefghi\u00e9xyz"`,
	"\"abcdefgh\xc3\xa9abcdefgh\"", "\"abcdefghijk\xffabcdefgh\"", "\"abcdefghij\tklmnop\"",
	`"s1796645435696591493a1796645435688888328 "`, `"abcdefghijklmnopqrstuvw`,
}

// FuzzScannerString checks String against json.Unmarshal into a string:
// whatever String accepts, json.Unmarshal accepts with the same value.
func FuzzScannerString(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewScanner(b)
		got, ok := s.String()
		if !ok || !s.End() {
			return
		}
		var want string
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("String accepted %q = %q; json.Unmarshal: %v", b, got, err)
		}
		if got != want {
			t.Fatalf("String(%q) = %q, json.Unmarshal: %q", b, got, want)
		}
		s = NewScanner(b)
		if raw, ok := s.RawString(); ok && string(raw) != want {
			t.Fatalf("RawString(%q) = %q, json.Unmarshal: %q", b, raw, want)
		}
	})
}

// FuzzScannerValue checks Int and Bool against json.Unmarshal into an int
// and a bool, Skip against json.Valid and RawString against String.
func FuzzScannerValue(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewScanner(b)
		if n, ok := s.Int(); ok && s.End() {
			var want int
			if err := json.Unmarshal(b, &want); err != nil || n != want {
				t.Fatalf("Int(%q) = %d; json.Unmarshal: %d, %v", b, n, want, err)
			}
		}
		s = NewScanner(b)
		if v, ok := s.Bool(); ok && s.End() {
			var want bool
			if err := json.Unmarshal(b, &want); err != nil || v != want {
				t.Fatalf("Bool(%q) = %v; json.Unmarshal: %v, %v", b, v, want, err)
			}
		}
		s = NewScanner(b)
		if s.Skip() && s.End() && !json.Valid(b) {
			t.Fatalf("Skip accepted %q, which is not valid JSON", b)
		}
		s = NewScanner(b)
		if raw, ok := s.RawString(); ok && s.End() {
			s = NewScanner(b)
			if str, ok := s.String(); !ok || str != string(raw) {
				t.Fatalf("RawString(%q) = %q, String: %q, %v", b, raw, str, ok)
			}
		}
	})
}

func TestScannerString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"Hello"`, "Hello"},
		{`"a\nb"`, "a\nb"},
		{`"say \"hi\""`, `say "hi"`},
		{`"\ud83d\ude00"`, "😀"},
		{`"\ud83d"`, "\ufffd"},
		{`"\ud83d\u0041"`, "\ufffdA"},
		{"\"bad \xff byte\"", "bad \ufffd byte"},
	} {
		s := NewScanner([]byte(tc.in))
		got, ok := s.String()
		if !ok || got != tc.want || !s.End() {
			t.Errorf("String(%s) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	for _, in := range []string{`"\'"`, `"\x"`, `"\u00"`, "\"a\nb\"", `"open`, `null`, `7`} {
		s := NewScanner([]byte(in))
		if got, ok := s.String(); ok {
			t.Errorf("String(%q) = %q, want declined", in, got)
		}
	}
}

func TestScannerSkipDeclinesDeepNesting(t *testing.T) {
	deep := make([]byte, 0, 2*(maxSkipDepth+2))
	for range maxSkipDepth + 2 {
		deep = append(deep, '[')
	}
	for range maxSkipDepth + 2 {
		deep = append(deep, ']')
	}
	s := NewScanner(deep)
	if s.Skip() {
		t.Error("Skip accepted nesting deeper than maxSkipDepth")
	}
}

func TestIgnorable(t *testing.T) {
	fields := []string{"type", "delta"}
	for key, want := range map[string]bool{"id": true, "model": true, "type": false, "TYPE": false, "Delta": false, "typé": false} {
		if got := Ignorable([]byte(key), fields); got != want {
			t.Errorf("Ignorable(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestScannerStringAllocations(t *testing.T) {
	for _, in := range []string{`"Hello world"`, `"line\nbreak \"quoted\" \u00e9"`} {
		b := []byte(in)
		n := testing.AllocsPerRun(100, func() {
			s := NewScanner(b)
			if _, ok := s.String(); !ok {
				t.Fatal("declined")
			}
		})
		if n > 1 {
			t.Errorf("String(%s): %v allocations, want at most 1 (the string)", in, n)
		}
	}
}

func TestArrayAndOne(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int // elements; -1: declined
		oneN int
	}{
		{`[]`, 0, 0},
		{`[{"a":1}]`, 1, 1},
		{`[{"a":1},{"a":2}]`, 2, -1},
		{` [ { "a" : 1 } , { } ] `, 2, -1},
		{`[{"a":1},]`, -1, -1},
		{`[1]`, -1, -1},
		{`{}`, -1, -1},
		{`[{"a":1}`, -1, -1},
		{`[{"a":`, -1, -1},
	} {
		body := func(s *Scanner) func(*int) bool {
			return func(v *int) bool {
				*v = 7
				_, ok := s.Object(func([]byte) (uint32, bool) { return 0, s.Skip() })
				return ok
			}
		}
		check := func(what string, got []int, ok bool, want int) {
			t.Helper()
			switch {
			case want < 0 && (ok || got != nil):
				t.Errorf("%s(%s) = %v, %v; want it declined", what, tc.in, got, ok)
			case want >= 0 && (!ok || got == nil || len(got) != want):
				t.Errorf("%s(%s) = %v, %v; want %d elements", what, tc.in, got, ok, want)
			}
			for _, v := range got {
				if v != 7 {
					t.Errorf("%s(%s): an element the body did not read: %v", what, tc.in, got)
				}
			}
		}
		var buf []int
		s := NewScanner([]byte(tc.in))
		got, ok := Array(&s, &buf, body(&s))
		check("Array", got, ok, tc.n)
		var slot [1]int
		s = NewScanner([]byte(tc.in))
		got, ok = One(&s, &slot, body(&s))
		check("One", got, ok, tc.oneN)
	}
}
