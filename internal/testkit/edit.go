package testkit

// Edit applies a fuzzer's edits to s: each three bytes (op, position,
// byte) replace, insert or delete one byte. Fuzz tests use it to derive
// near misses from a valid input (a ticket, a grant) that the fuzzer's own
// mutations would rarely reach.
func Edit(s string, edits []byte) string {
	b := []byte(s)
	for i := 0; i+2 < len(edits); i += 3 {
		op, c := edits[i]%3, edits[i+2]
		if len(b) == 0 {
			op = 1
		}
		pos := int(edits[i+1]) % (len(b) + 1)
		switch op {
		case 0:
			pos %= len(b)
			b[pos] = c
		case 1:
			b = append(b[:pos], append([]byte{c}, b[pos:]...)...)
		case 2:
			pos %= len(b)
			b = append(b[:pos], b[pos+1:]...)
		}
	}
	return string(b)
}
