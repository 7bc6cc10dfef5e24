package session

import (
	"sync"
	"time"
)

// tenantCooldowns are the cooldowns of failures that belong to a tenant's
// own key (turn.private): what the shared registry records for a model,
// kept here for that tenant's sessions on this replica only. They spare
// those sessions a call per continuation to a model their key is limited
// on (a fallback would otherwise revert at once, the shared registry
// knowing nothing), and spare every other tenant the cooldown.
type tenantCooldowns struct {
	mu    sync.Mutex
	until map[tenantModel]time.Time
}

type tenantModel struct{ tenant, model string }

// cool suppresses model for tenant until until (a later cooldown kept).
// Ended ones are dropped as it goes: the map holds the live ones only.
func (c *tenantCooldowns) cool(tenant, model string, until, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		c.until = map[tenantModel]time.Time{}
	}
	for k, u := range c.until {
		if !u.After(now) {
			delete(c.until, k)
		}
	}
	k := tenantModel{tenant, model}
	if until.After(c.until[k]) {
		c.until[k] = until
	}
}

// cooling reports whether model is suppressed for tenant at now.
func (c *tenantCooldowns) cooling(tenant, model string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.until[tenantModel{tenant, model}].After(now)
}
