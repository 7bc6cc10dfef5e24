package session

import "strconv"

// PageTokenAfter is the List page token of tenant's sessions created after
// s: a caller that shows fewer sessions than List returned (a page bounded
// by its size) goes on from there.
func PageTokenAfter(s *Session) string { return "o" + strconv.FormatUint(s.order, 10) }

// MessagesTokenAfter is the position after the first n entries from offset:
// Messages(offset+n, …) goes on from there.
func MessagesTokenAfter(offset, n int) string { return "m" + strconv.Itoa(offset+n) }
