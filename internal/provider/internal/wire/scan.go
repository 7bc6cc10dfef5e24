package wire

import (
	"strings"

	"github.com/agentd/agentd/internal/jsonenc"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads one JSON document from a byte slice, token by token, for
// the providers' fast paths: the few hot stream frames (text, thinking and
// tool-argument deltas) that make up nearly every frame of a stream are
// decoded without a reflective json.Unmarshal per frame.
//
// It is deliberately narrow. Every method reports false ("decline") on
// anything it does not read with certainty — a key with an escape, a
// number that is not a plain integer, nesting deeper than maxSkipDepth,
// invalid JSON — and a caller that sees false falls back to json.Unmarshal,
// which then gives today's result or today's error. What a method does
// accept it decodes exactly as encoding/json does: string escapes,
// surrogate pairs, and invalid UTF-8 replaced by U+FFFD byte by byte.
type Scanner struct {
	b []byte
	i int
}

// NewScanner returns a Scanner at the start of b.
func NewScanner(b []byte) Scanner { return Scanner{b: b} }

// maxSkipDepth bounds the nesting of a value Skip validates.
const maxSkipDepth = 32

func (s *Scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Byte consumes c, after whitespace, if it comes next.
func (s *Scanner) Byte(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.ws()
	return s.i == len(s.b)
}

// Member reads the next member's key of an object whose '{' was consumed;
// n is the number of members read before. It returns more false (and ok
// true) at the object's '}'. The key is returned raw: a key with an escape
// or invalid UTF-8 is declined, so that it equals its decoded form.
func (s *Scanner) Member(n int) (key []byte, more, ok bool) {
	if s.Byte('}') {
		return nil, false, true
	}
	if n > 0 && !s.Byte(',') {
		return nil, false, false
	}
	key, ok = s.RawString()
	if !ok || !s.Byte(':') {
		return nil, false, false
	}
	return key, true, true
}

// Object reads the members of an object whose '{' was consumed, up to its
// '}': member reads each one's value (its key given raw, as Member gives
// it) and names the member's bit, 0 for one not tracked. A bit seen twice
// (a member repeated) declines the object, as does a member that could not
// be read. It returns the bits seen.
func (s *Scanner) Object(member func(key []byte) (bit uint32, ok bool)) (seen uint32, ok bool) {
	for n := 0; ; n++ {
		k, more, ok := s.Member(n)
		if !ok {
			return 0, false
		}
		if !more {
			return seen, true
		}
		bit, ok := member(k)
		if !ok || seen&bit != 0 {
			return 0, false
		}
		seen |= bit
	}
}

// Array reads an array of objects into *buf's array, reused from call to
// call (grown as needed): for each, after its '{', body reads its members
// into a zero element (with Object). It returns the elements, an empty
// slice that is not nil for "[]" (as encoding/json leaves a slice field).
// An element body declines, or anything but an object, declines the array
// (nil, false).
func Array[T any](s *Scanner, buf *[]T, body func(*T) bool) ([]T, bool) {
	if !s.Byte('[') {
		return nil, false
	}
	if s.Byte(']') {
		return []T{}, true
	}
	elems := (*buf)[:0]
	for {
		var zero T
		elems = append(elems, zero)
		if !s.Byte('{') || !body(&elems[len(elems)-1]) {
			return nil, false
		}
		if s.Byte(',') {
			continue
		}
		if !s.Byte(']') {
			return nil, false
		}
		*buf = elems
		return elems, true
	}
}

// One is Array for an array of no object or one (a stream chunk's
// candidates or choices), read into slot: it returns slot[:0] or
// slot[:1]; a second object declines the array.
func One[T any](s *Scanner, slot *[1]T, body func(*T) bool) ([]T, bool) {
	var zero T
	slot[0] = zero
	if !s.Byte('[') {
		return nil, false
	}
	if s.Byte(']') {
		return slot[:0], true
	}
	if !s.Byte('{') || !body(&slot[0]) || !s.Byte(']') {
		return nil, false
	}
	return slot[:1], true
}

// Null consumes a null literal if it comes next.
func (s *Scanner) Null() bool {
	s.ws()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// RawString reads a string that needs no decoding — no escape, no control
// character, valid UTF-8 — and returns its bytes (a slice of the input).
// Any other string is declined.
func (s *Scanner) RawString() ([]byte, bool) {
	if !s.Byte('"') {
		return nil, false
	}
	// The index in a local, not the field: the loop then keeps it in a
	// register (a key is read here, a few bytes, on every member).
	b, start := s.b, s.i
	for i := start; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return b[start:i], true
		case c == '\\' || c < ' ':
			return nil, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false
			}
			i += size
		}
	}
	return nil, false
}

// String reads a string and decodes it as encoding/json does. A string
// that needs no decoding costs one allocation (none when empty), one with
// escapes or invalid UTF-8 one too. Its plain ASCII is passed over a word
// at a time: a text can be long, where RawString's keys and kinds are a
// few bytes, for which the word's test costs more than it saves.
func (s *Scanner) String() (string, bool) {
	if !s.Byte('"') {
		return "", false
	}
	b, start := s.b, s.i
	next := start // where the next word may be tested
	for i := start; i < len(b); {
		if i >= next {
			if n := jsonenc.PlainWords(b[i:]); n > 0 {
				i += n
				continue
			}
			next = i + 8 // a byte at a time to the end of this word
		}
		c := b[i]
		switch {
		case c == '"':
			s.i = i + 1
			return string(b[start:i]), true
		case c == '\\' || c < ' ':
			s.i = i
			return s.unquote(start)
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				s.i = i
				return s.unquote(start)
			}
			i += size
		}
	}
	return "", false
}

// StringOrNull is String, with null read as "" (encoding/json leaves a
// string field untouched on null: the zero value, for a field seen once).
func (s *Scanner) StringOrNull() (string, bool) {
	if s.Null() {
		return "", true
	}
	return s.String()
}

// unquote decodes the string that starts at start (after its quote) from
// s.i, the first byte that needs decoding, on: encoding/json's unquote,
// after its scanner's validation (an escape is one of \" \\ \/ \b \f \n \r
// \t \uXXXX; a control character is invalid).
func (s *Scanner) unquote(start int) (string, bool) {
	end := s.stringEnd()
	if end < 0 {
		return "", false
	}
	var b strings.Builder
	b.Grow(end - start)
	b.Write(s.b[start:s.i])
	in := s.b[:end]
	r := s.i
	for r < end {
		c := in[r]
		switch {
		case c == '\\':
			r++
			switch in[r] {
			case '"', '\\', '/':
				b.WriteByte(in[r])
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				rr := hex4(in[r+1:])
				r += 5
				if utf16.IsSurrogate(rr) {
					// A valid pair is one rune; anything else makes the
					// first half U+FFFD, and what follows is read anew.
					if r+6 <= end && in[r] == '\\' && in[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(in[r+2:])); dec != utf8.RuneError {
							b.WriteRune(dec)
							r += 6
							continue
						}
					}
					rr = utf8.RuneError
				}
				b.WriteRune(rr)
				continue
			}
			r++
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			r++
		default:
			rr, size := utf8.DecodeRune(in[r:end])
			b.WriteRune(rr) // U+FFFD for each invalid byte
			r += size
		}
	}
	s.i = end + 1
	return b.String(), true
}

// stringEnd validates the rest of the string from s.i and returns the
// index of its closing quote, or -1 when it is not valid JSON.
func (s *Scanner) stringEnd() int {
	for i := s.i; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			return i
		case c < ' ':
			return -1
		case c == '\\':
			i++
			if i >= len(s.b) {
				return -1
			}
			switch s.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s.b) || hex4(s.b[i+1:]) < 0 {
					return -1
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// hex4 is the value of the 4 hex digits b starts with, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// Int is Int64 for an int field.
func (s *Scanner) Int() (int, bool) {
	n, ok := s.Int64()
	if !ok || int64(int(n)) != n {
		return 0, false
	}
	return int(n), true
}

// Bool reads true or false (not null: encoding/json leaves a bool field
// untouched on null, which the fast paths leave to it).
func (s *Scanner) Bool() (v, ok bool) {
	s.ws()
	switch {
	case len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
		return true, true
	case len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
		return false, true
	}
	return false, false
}

// Int64 reads an integer: -?(0|[1-9][0-9]*), at most 18 digits, not
// followed by a fraction or an exponent (which encoding/json refuses for
// an integer field). Anything else is declined.
func (s *Scanner) Int64() (int64, bool) {
	s.ws()
	i, neg := s.i, false
	if i < len(s.b) && s.b[i] == '-' {
		neg = true
		i++
	}
	start := i
	var n int64
	for i < len(s.b) && '0' <= s.b[i] && s.b[i] <= '9' {
		n = n*10 + int64(s.b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || digits > 1 && s.b[start] == '0' {
		return 0, false
	}
	if i < len(s.b) && (s.b[i] == '.' || s.b[i] == 'e' || s.b[i] == 'E') {
		return 0, false
	}
	s.i = i
	if neg {
		n = -n
	}
	return n, true
}

// Ignorable reports whether json.Unmarshal would ignore a member named key
// in a struct whose members are fields: key is ASCII and matches none of
// them, even without regard to case (encoding/json matches keys to fields
// case-insensitively). A non-ASCII key is declined: its case folding is
// not worth getting right here.
func Ignorable(key []byte, fields []string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	for _, f := range fields {
		if len(f) == len(key) && strings.EqualFold(f, string(key)) {
			return false
		}
	}
	return true
}

// Skip validates and skips one value of any kind, nested at most
// maxSkipDepth deep.
func (s *Scanner) Skip() bool { return s.skip(0) }

func (s *Scanner) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.i++
		for n := 0; ; n++ {
			if s.Byte('}') {
				return true
			}
			if n > 0 && !s.Byte(',') {
				return false
			}
			if !s.skipString() || !s.Byte(':') || !s.skip(depth+1) {
				return false
			}
		}
	case c == '[':
		s.i++
		for n := 0; ; n++ {
			if s.Byte(']') {
				return true
			}
			if n > 0 && !s.Byte(',') {
				return false
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	case c == '"':
		return s.skipString()
	case c == '-' || '0' <= c && c <= '9':
		return s.skipNumber()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return true
			}
		}
		return false
	}
}

func (s *Scanner) skipString() bool {
	if !s.Byte('"') {
		return false
	}
	end := s.stringEnd()
	if end < 0 {
		return false
	}
	s.i = end + 1
	return true
}

// skipNumber skips a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *Scanner) skipNumber() bool {
	b, i := s.b, s.i
	digits := func() bool {
		start := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if !digits() {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	s.i = i
	return true
}
