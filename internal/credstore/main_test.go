package credstore

import (
	"testing"

	"go.uber.org/goleak"
)

// No reconciler outlives its store, no client goroutine its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
