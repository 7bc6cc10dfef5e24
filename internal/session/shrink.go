package session

// Go's maps keep their buckets as their entries go: a manager or a store
// that held 100 000 sessions holds their maps' buckets (tens of MiB) after
// every session was deleted. The session maps are therefore copied into a
// map of their size once they hold less than a quarter of their peak.

// shrinkFrom is the peak below which a map is not copied: a small map's
// buckets cost less than the copies would.
const shrinkFrom = 1024

// shrunk returns m after one or more deletes: m itself, or a copy of it
// when it holds less than a quarter of what it held at its peak (*peak,
// which it keeps: the size before the last delete is at least the size
// that delete saw). A copy costs what the deletes since the peak did, at
// most, so deleting stays constant-time on average.
func shrunk[K comparable, V any](m map[K]V, peak *int) map[K]V {
	n := len(m)
	*peak = max(*peak, n+1)
	if *peak < shrinkFrom || n > *peak/4 {
		return m
	}
	c := make(map[K]V, n)
	for k, v := range m {
		c[k] = v
	}
	*peak = n
	return c
}
