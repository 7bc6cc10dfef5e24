package chat

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: servers drain, streams end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
