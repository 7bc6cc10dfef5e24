package credstore

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testkit"
)

// The Redis store's local view takes a snapshot of Redis over its own
// state, except what it wrote after the snapshot was read.
func TestLocalViewReplace(t *testing.T) {
	clk := testkit.NewClock(time.Now())
	m := NewMemory(MemoryOptions{Now: clk.Now})
	m.noRedeem = true
	cred := func(id string) memCred {
		return memCred{Credential: Credential{ID: id, Provider: "p", Secret: "secret-" + id, Source: SourceAPI}}
	}
	m.put(cred("old"))
	m.put(cred("gone"))
	since := m.generation()
	// Written locally after the snapshot was read: kept.
	m.put(cred("new"))
	m.mirrorBlock("", "old", clk.Now().Add(time.Hour), "limit", false)
	m.forget("", "gone")

	snap := []memCred{cred("old"), cred("gone"), cred("other")}
	m.replace("p", snap, since)
	got := map[string]Info{}
	infos, _ := m.List(testkit.Context(t), Filter{Provider: "p"})
	for _, i := range infos {
		got[i.ID] = i
	}
	if len(got) != 3 || got["old"].Status != StatusBlocked || got["new"].ID == "" || got["other"].ID == "" {
		t.Errorf("after an older snapshot: %+v; want old (blocked), other, new", infos)
	}

	// A snapshot read after all that wins.
	since = m.generation()
	m.replace("p", []memCred{cred("other")}, since)
	if infos, _ := m.List(testkit.Context(t), Filter{Provider: "p"}); ids(infos) != "other" {
		t.Errorf("after a newer snapshot: %s, want other", ids(infos))
	}
	if len(m.gone) != 0 {
		t.Errorf("tombstones left: %v", m.gone)
	}
	// An empty snapshot empties the provider.
	m.replace("p", nil, m.generation())
	if ps := m.providers(); len(ps) != 0 {
		t.Errorf("providers after an empty snapshot = %v", ps)
	}
}

func TestSanitizeReasonAndWindow(t *testing.T) {
	for _, tc := range []struct{ in, secret, want string }{
		{"", "", "usage limit reached"},
		{"  quota\x00 for\tkey  ", "", "quota  for key"},
		{"bad key sk-123456 used", "sk-123456", "bad key [redacted] used"},
		{"short xy", "xy", "short xy"},
		{"a\xff\xfeb", "", "a\uFFFDb"},
	} {
		if got := sanitizeReason(tc.in, tc.secret); got != tc.want {
			t.Errorf("sanitizeReason(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want time.Duration }{
		{0, DefaultBlock}, {-time.Second, DefaultBlock}, {time.Microsecond, time.Millisecond},
		{1500 * time.Microsecond, time.Millisecond}, {time.Hour, time.Hour}, {365 * 24 * time.Hour, MaxBlock},
	} {
		if got := normWindow(tc.in); got != tc.want {
			t.Errorf("normWindow(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
