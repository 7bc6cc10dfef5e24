package session_test

import (
	"testing"

	"github.com/agentd/agentd/internal/redistest"
)

// Every run ends: no prompt goroutine outlives its session manager.
func TestMain(m *testing.M) {
	redistest.VerifyTestMain(m)
}
