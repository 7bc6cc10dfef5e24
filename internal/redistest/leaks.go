package redistest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// VerifyTestMain runs the package's tests and fails the run when
// goroutines outlive them, as goleak.VerifyTestMain does, but gives them up
// to 3 s to end first: a go-redis pool that failed to dial (a Redis the
// test killed) retries from a goroutine that sleeps a second between tries
// and ends at its next wake-up after its client's Close.
func VerifyTestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(3 * time.Second)
		for {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
				code = 1
				break
			}
			time.Sleep(50 * time.Millisecond) // polling goroutines' end: no event to wait on
		}
	}
	os.Exit(code)
}
