package server

import "bytes"

// JSON may escape a UTF-16 surrogate that has no partner ("\ud83d" of an
// emoji cut in half, as JavaScript's JSON.stringify writes a string sliced
// mid-character): valid JSON, but no Unicode text. encoding/json reads such
// an escape as U+FFFD; protobuf's JSON decoder, which reads every REST body,
// refuses the whole body with a message naming neither the field nor the
// cause ("proto: unexpected EOF"). A body read whole (readBody) gets the
// lone escapes replaced with \ufffd first, so it decodes as encoding/json
// would have read it; a pair, a doubled backslash ("\\ud83d" is text) and
// everything else stay as they are.

// fixLoneSurrogates returns b with each \u escape of a lone surrogate
// replaced by \ufffd (the same length), b itself when there is none.
func fixLoneSurrogates(b []byte) []byte {
	i := bytes.Index(b, []byte(`\u`))
	if i < 0 {
		return b
	}
	// Start at the backslash run that holds the first \u: an even run
	// before it is text, not an escape.
	for i > 0 && b[i-1] == '\\' {
		i--
	}
	var out []byte // copy on the first change
	for i < len(b) {
		if b[i] != '\\' {
			i++
			continue
		}
		if i+1 >= len(b) || b[i+1] != 'u' {
			i += 2 // \\, \" and the other two-byte escapes
			continue
		}
		u, ok := hex4(b, i+2)
		if !ok {
			i += 2
			continue
		}
		switch {
		case u >= 0xd800 && u <= 0xdbff:
			if lo, ok := hex4(b, i+8); ok && i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' && lo >= 0xdc00 && lo <= 0xdfff {
				i += 12 // a pair
				continue
			}
		case u < 0xdc00 || u > 0xdfff:
			i += 6
			continue
		}
		if out == nil {
			out = bytes.Clone(b)
		}
		copy(out[i+2:i+6], "fffd")
		i += 6
	}
	if out == nil {
		return b
	}
	return out
}

// hex4 is the value of the 4 hex digits at b[i:], if they are.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var v rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
