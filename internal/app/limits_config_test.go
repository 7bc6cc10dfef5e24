package app

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/session"
)

// The configuration's default limits are the session engine's: a Manager
// built without them enforces the same.
func TestSessionLimitsDefaults(t *testing.T) {
	cfg, err := config.Parse(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sessionLimits(cfg.Limits), session.DefaultLimits(); got != want {
		t.Fatalf("limits from the default configuration = %+v; the engine's defaults = %+v", got, want)
	}
}
