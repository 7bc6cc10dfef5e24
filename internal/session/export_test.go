package session

// RunningPrompts is the prompts of tenant this manager counts as running
// (without a shared store).
func RunningPrompts(m *Manager, tenant string) int {
	m.prompts.mu.Lock()
	defer m.prompts.mu.Unlock()
	return m.prompts.n[tenant]
}
