package session

import "context"

// RunningPrompts is the prompts of tenant that the store of a manager on
// its own MemoryStore counts as running.
func RunningPrompts(m *Manager, tenant string) int {
	b := m.opts.Shared.(*MemoryReplica).b
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.liveSlotsLocked(tenant).ends)
}

// StorePrompts is the prompts of tenant that b counts as running.
func StorePrompts(b *MemoryStore, tenant string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.liveSlotsLocked(tenant).ends)
}

// GenAISystem is the gen_ai.system of a provider kind.
var GenAISystem = genAISystem

// ReleaseIdleLogs drops the log copies of m's idle sessions now.
func ReleaseIdleLogs(m *Manager) { m.releaseIdleLogs(0) }

// MirrorPoll is how often a manager looks at the copies that follow a
// stored log.
const MirrorPoll = mirrorPoll

// Pull runs one pull of the stored log into s's copy now, as one the
// mirror started would.
func Pull(ctx context.Context, s *Session) error { return s.pull(ctx) }

// HoldsOwnEvents reports whether s's log holds events of this replica the
// store has not confirmed yet.
func HoldsOwnEvents(s *Session) bool {
	_, _, own := s.log.newest()
	return own
}
