package cooldown

import "strings"

// OwnsKey reports whether key is one of the Redis cooldown registry's under
// prefix ({cooldowns}:…). The round-trip metrics count by it.
func OwnsKey(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix)
	return ok && strings.HasPrefix(rest, "{cooldowns}")
}
