package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: servers drain, streams end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
