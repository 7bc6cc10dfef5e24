package credstore

import "strings"

// OwnsKey reports whether key is one of the Redis credential store's under
// prefix (RedisOptions.KeyPrefix): a provider's keys ({prov:<name>}:…) and
// the set of providers. The round-trip metrics count by it.
func OwnsKey(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix)
	return ok && (strings.HasPrefix(rest, "{prov:") || rest == "providers")
}
