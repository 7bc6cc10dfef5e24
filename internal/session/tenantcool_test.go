package session

import (
	"testing"
	"time"
)

// A tenant's cooldown is that tenant's and that model's; a later one is
// kept over an earlier; ended ones leave the map as new ones come.
func TestTenantCooldowns(t *testing.T) {
	var c tenantCooldowns
	now := time.Unix(1000, 0)
	c.cool("A", "p/m", now.Add(time.Minute), now)
	c.cool("A", "p/m", now.Add(time.Second), now) // earlier: kept the minute
	c.cool("B", "p/n", now.Add(time.Second), now)
	for _, tc := range []struct {
		tenant, model string
		at            time.Duration
		want          bool
	}{
		{"A", "p/m", 30 * time.Second, true},
		{"B", "p/m", 0, false},
		{"A", "p/n", 0, false},
		{"B", "p/n", 0, true},
		{"B", "p/n", 2 * time.Second, false},
		{"A", "p/m", time.Minute, false},
	} {
		if got := c.cooling(tc.tenant, tc.model, now.Add(tc.at)); got != tc.want {
			t.Errorf("cooling(%s, %s) at +%v = %t, want %t", tc.tenant, tc.model, tc.at, got, tc.want)
		}
	}
	c.cool("C", "p/m", now.Add(2*time.Minute), now.Add(90*time.Second))
	if len(c.until) != 1 {
		t.Errorf("after the others ended: %v; want C's alone", c.until)
	}
}
