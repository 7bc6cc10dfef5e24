package session_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every run ends: no prompt goroutine outlives its session manager.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
