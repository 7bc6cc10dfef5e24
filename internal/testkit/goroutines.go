package testkit

import (
	"bytes"
	"runtime"
)

// Goroutines counts the goroutines whose stack has a frame of a function
// whose name starts with prefix (a package path and a dot, say
// "github.com/agentd/agentd/internal/session."): a cost bound counted this
// way sees only the code it is about, not the test framework's, the Redis
// client's pools or the runtime's goroutines, which come and go with the
// load.
func Goroutines(prefix string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	p := []byte("\n" + prefix)
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, p) {
			count++
		}
	}
	return count
}
