package sessionstore

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// orphanTTL is the life of a session's key written while the session has
// no record (a write racing its Remove, or after it): such a key is
// garbage nothing reads, and it expires.
const orphanTTL = time.Minute

// guardScript: KEYS[1] meta, KEYS[2..] keys of the same session just
// written; ARGV[1] ttl ms → 1 when the session has its record, else 0
// with the keys given the ttl. Queued after a write (same slot, same
// connection, in order), it leaves no key of a removed session without a
// TTL: a write before Remove's DEL is deleted by it, one after it expires.
var guardScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'record') == 1 then
  return 1
end
for i = 2, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
end
return 0
`)

// guardKeys are guardScript's keys for writes to id's keys of kinds.
func (r *Redis) guardKeys(id string, kinds ...string) []string {
	keys := make([]string, 0, 1+len(kinds))
	keys = append(keys, r.key(id, "meta"))
	for _, k := range kinds {
		keys = append(keys, r.key(id, k))
	}
	return keys
}

// guard queues guardScript after writes to id's keys of kinds.
func (r *Redis) guard(run scriptRunner, id string, kinds ...string) {
	run(guardScript, r.guardKeys(id, kinds...), orphanTTL.Milliseconds())
}
