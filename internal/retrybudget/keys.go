package retrybudget

import "strings"

// OwnsKey reports whether key is the Redis retry budget's under prefix
// ({budget}:…). The round-trip metrics count by it.
func OwnsKey(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix)
	return ok && strings.HasPrefix(rest, "{budget}")
}
