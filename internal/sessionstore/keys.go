package sessionstore

import "strings"

// OwnsKey reports whether key (or a pub/sub channel) is one of the session
// store's under prefix (Options.KeyPrefix): a session's keys, the tenant
// indexes, the creation order and running set, the replicas' control
// channels. The round-trip metrics count by it (the layout's one home is
// here, beside the key builders of redis.go).
func OwnsKey(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix)
	return ok && (strings.HasPrefix(rest, "{ses_") || strings.HasPrefix(rest, "sessions:") ||
		strings.HasPrefix(rest, "tenant:") || strings.HasPrefix(rest, "replica:"))
}
