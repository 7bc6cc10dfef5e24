package server_test

import (
	"testing"

	"github.com/agentd/agentd/internal/redistest"
)

// Every test must leave no goroutine behind: servers drain, streams end.
func TestMain(m *testing.M) {
	redistest.VerifyTestMain(m)
}
