// Package jsonenc appends JSON values as encoding/json writes them, byte for
// byte, without reflection: the providers' request encoders write their
// bodies with it, and the Redis session store its stored events (their
// tests and fuzzers hold each writer to json.Marshal).
package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// AppendRaw appends raw JSON as encoding/json does a json.RawMessage:
// compacted, with <, >, &, U+2028 and U+2029 escaped; null when empty.
func AppendRaw(b []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	// Compacted in place; escaped as json.Marshal escapes it only when it
	// holds what HTMLEscape changes (rare in a tool's input or schema).
	start := len(b)
	out := bytes.NewBuffer(b)
	if err := json.Compact(out, raw); err != nil {
		return b, false
	}
	b = out.Bytes()
	c := b[start:]
	if !bytes.ContainsAny(c, "<>&") && !bytes.Contains(c, lineSep) && !bytes.Contains(c, paraSep) {
		return b, true
	}
	c = bytes.Clone(c)
	out = bytes.NewBuffer(b[:start])
	json.HTMLEscape(out, c)
	return out.Bytes(), true
}

// U+2028 and U+2029, which json.HTMLEscape escapes too.
var lineSep, paraSep = []byte("\u2028"), []byte("\u2029")

// AppendFloat appends f as encoding/json does a float64 (false for NaN
// and the infinities, which it refuses).
func AppendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 is written e-9.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

const hexDigits = "0123456789abcdef"

// htmlSafe holds the ASCII bytes AppendString copies as they are (a table,
// as encoding/json's: one load a byte, not six comparisons).
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// plain8 reports whether the 8 bytes of s at i are ASCII that AppendString
// copies as they are: a text's long runs of plain bytes are skipped a word
// at a time. Each test is exact for the word as a whole (a byte it flags
// may flag the ones above it too, which only sends the word to the byte
// loop).
func plain8(s string, i int) bool {
	w := word(s, i)
	return quoteFree(w) && zero(w^('<'*ones))|zero(w^('>'*ones))|zero(w^('&'*ones)) == 0
}

const ones, highs = 0x0101010101010101, 0x8080808080808080

// word is the 8 bytes of s at i as one little-endian word: one load, once
// the slice has told the compiler its length (indexing s itself costs
// eight loads and their bounds checks).
func word[T ~string | ~[]byte](s T, i int) uint64 {
	w := s[i : i+8]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// zero flags the bytes of v that are 0 (and possibly a byte above one).
func zero(v uint64) uint64 { return (v - ones) & ^v & highs }

// quoteFree reports whether no byte of w is outside ASCII, below 0x20, '"'
// or '\\'.
func quoteFree(w uint64) bool {
	return w&highs|(w-0x20*ones)&^w&highs|zero(w^('"'*ones))|zero(w^('\\'*ones)) == 0
}

// PlainWords returns the length of the longest prefix of s, in whole
// 8-byte words, whose bytes a JSON string holds as they are: ASCII from
// the space up, neither '"' nor '\\'. Every JSON writer and reader copies
// those unchanged (protojson, encoding/json, the providers' decoders), so
// they pass over a text's runs of them a word at a time and read the rest
// a byte at a time.
func PlainWords[T ~string | ~[]byte](s T) int {
	i := 0
	for len(s)-i >= 8 && quoteFree(word(s, i)) {
		i += 8
	}
	return i
}

// AppendString appends s quoted as json.Marshal quotes it: HTML's <, >
// and & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	next := 0 // where the next word may be tested
	for i := 0; i < len(s); {
		if i >= next {
			if i+8 <= len(s) && plain8(s, i) {
				i += 8
				continue
			}
			next = i + 8 // a byte at a time to the end of this word
		}
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendStringField appends ,"key":s unless s is empty (an omitempty
// string field after the first). key is written as it is.
func AppendStringField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	b = append(append(append(b, `,"`...), key...), `":`...)
	return AppendString(b, s)
}

// AppendStringsField appends ,"key":[…] unless ss is empty (an omitempty
// list of strings).
func AppendStringsField(b []byte, key string, ss []string) []byte {
	if len(ss) == 0 {
		return b
	}
	b = append(append(append(b, `,"`...), key...), `":[`...)
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// AppendFloatField appends ,"key":f unless f is nil (an omitempty
// *float64); false for a float JSON cannot hold, as AppendFloat.
func AppendFloatField(b []byte, key string, f *float64) ([]byte, bool) {
	if f == nil {
		return b, true
	}
	b = append(append(append(b, `,"`...), key...), `":`...)
	return AppendFloat(b, *f)
}
