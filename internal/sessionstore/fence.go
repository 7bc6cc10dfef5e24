package sessionstore

import (
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/agentd/agentd/internal/session"
)

// Fencing. Every lease a replica takes (Start, Acquire) carries an epoch:
// the session's :epoch counter, incremented by the same script that sets
// the lease. From then until the replica lets the lease go (EndRun,
// Release, Remove) or a write is refused, every write of that session by
// this replica runs in a script that first checks that :lease still names
// this replica and :epoch is still that epoch, and writes nothing when not
// (the FENCED error, session.ErrFenced to the caller). A replica that lost
// its lease (expired during a stall, taken over by another) thus cannot
// write into the log, the history or the run state its successor now owns.
//
// The check is folded into the scripts the writes were anyway: fencing
// adds no round trip.

// fences are the epochs of the leases this replica holds, by session id.
// A lease found lost (a write refused, a renewal refused) stays as lostEpoch
// until the session lets it go (EndRun, Release, Remove) or takes a new
// one: until then its writes stay refused, rather than going out unfenced.
type fences struct {
	mu sync.RWMutex
	m  map[string]string // session id → epoch (decimal), or lostEpoch
}

// lostEpoch is no epoch a lease has: writes under it are refused.
const lostEpoch = "lost"

// of returns the fence arguments of a write of id: this replica and the
// epoch of its lease, or "" and "" (an unfenced write) when it holds none.
func (f *fences) of(replica, id string) (string, string) {
	f.mu.RLock()
	ep, ok := f.m[id]
	f.mu.RUnlock()
	if !ok {
		return "", ""
	}
	return replica, ep
}

func (f *fences) hold(id string, epoch int64) {
	f.set(id, strconv.FormatInt(epoch, 10))
}

// lose marks the lease of id lost, when this replica held one.
func (f *fences) lose(id string) {
	f.mu.Lock()
	if _, ok := f.m[id]; ok {
		f.m[id] = lostEpoch
	}
	f.mu.Unlock()
}

// loseEpoch marks the lease of id lost when it is the one of epoch (a
// refused write of an older lease does not touch a newer one).
func (f *fences) loseEpoch(id, epoch string) {
	f.mu.Lock()
	if ep, ok := f.m[id]; ok && (ep == epoch || epoch == "") {
		f.m[id] = lostEpoch
	}
	f.mu.Unlock()
}

func (f *fences) set(id, epoch string) {
	f.mu.Lock()
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[id] = epoch
	f.mu.Unlock()
}

// drop forgets the lease of id.
func (f *fences) drop(id string) {
	f.mu.Lock()
	delete(f.m, id)
	f.mu.Unlock()
}

// leaseArgs are the lease scripts' ARGV[1] and [2] for id: this replica,
// and the epoch of its lease ("": any, when it holds none it knows of).
func (r *Redis) leaseArgs(id string) (string, string) {
	_, epoch := r.fences.of(r.id, id)
	return r.id, epoch
}

// fenceCheck starts every fenced script: KEYS[1] is the session's :lease,
// KEYS[2] its :epoch; ARGV[1] the replica ("" for an unfenced write),
// ARGV[2] the epoch of its lease.
const fenceCheck = `
if ARGV[1] ~= '' and (redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[2]) then
  return redis.error_reply("FENCED the session lease is no longer this replica's")
end
`

// orphanGuard ends the fenced scripts that write keys of a session: KEYS[3]
// is its :meta, KEYS[4..] the keys written, ARGV[3] orphanTTL in ms. Keys
// written while the session has no record (a write racing Remove, or after
// it) get that TTL.
const orphanGuard = `
if redis.call('HEXISTS', KEYS[3], 'record') == 0 then
  for i = 4, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
end
`

var (
	// KEYS lease, epoch, meta, history, appended; ARGV fence, ttl, entry
	// JSON, the append's token → the history's new length. The token of
	// the last append is kept (appended): the same append run again (go-redis
	// sends a command again when its reply was lost) appends nothing and
	// answers the length again.
	appendScript = redis.NewScript(fenceCheck + `
if redis.call('GET', KEYS[5]) == ARGV[5] then
  return redis.call('LLEN', KEYS[4])
end
local n = redis.call('RPUSH', KEYS[4], ARGV[4])
redis.call('SET', KEYS[5], ARGV[5])
` + orphanGuard + `
return n
`)
	// KEYS lease, epoch, meta, run; ARGV fence, ttl, run JSON.
	setRunScript = redis.NewScript(fenceCheck + `
redis.call('SET', KEYS[4], ARGV[4])
` + orphanGuard + `
return 1
`)
	// KEYS lease, epoch, meta, stripped; ARGV fence, ttl, index.
	stripScript = redis.NewScript(fenceCheck + `
redis.call('SADD', KEYS[4], ARGV[4])
` + orphanGuard + `
return 1
`)
	// KEYS lease, epoch, meta; ARGV fence, ttl, mutable JSON → 1 when
	// written, 0 when the session does not exist (a Save racing a Remove
	// must not leave a record-less meta behind).
	saveScript = redis.NewScript(fenceCheck + `
if redis.call('HEXISTS', KEYS[3], 'record') == 1 then
  redis.call('HSET', KEYS[3], 'mutable', ARGV[4])
  return 1
end
return 0
`)
	// KEYS lease, epoch, meta, run; ARGV fence, ttl, mutable JSON, run
	// JSON: Save and SetRun at once.
	finishScript = redis.NewScript(fenceCheck + `
if redis.call('HEXISTS', KEYS[3], 'record') == 1 then
  redis.call('HSET', KEYS[3], 'mutable', ARGV[4])
end
redis.call('SET', KEYS[4], ARGV[5])
` + orphanGuard + `
return 1
`)
	// KEYS lease, epoch, meta, events; ARGV fence, ttl, MAXLEN, then a
	// seq and an event's JSON per event, in seq order → {1, newest seq}
	// when stored (events at or below the stream's newest are skipped:
	// written already, by a batch retried after a lost reply), {0, newest
	// seq} when, in a fenced write, a new event does not follow the newest
	// stored one (the stream lost events: a failover's unreplicated writes;
	// nothing from it on is written).
	eventsScript = redis.NewScript(fenceCheck + `
local top = 0
local last = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
if #last > 0 then top = tonumber(string.match(last[1][1], '^(%d+)')) end
for i = 5, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if seq > top then
    if ARGV[1] ~= '' and seq ~= top + 1 then
      return {0, top}
    end
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], ARGV[i] .. '-0', 'e', ARGV[i + 1])
    top = seq
  end
end
` + orphanGuard + `
return {1, top}
`)
)

// fencedKeys are a fenced script's keys for writes to id's keys of kinds,
// as r.key has them: the lease, the epoch and the meta key, then kinds'.
// They are substrings of one string, grown once to its size (every event
// batch and record write makes them): a Builder never changes the bytes
// it has written, so each key stays as it was cut.
func (r *Redis) fencedKeys(id string, kinds ...string) []string {
	each := len(r.o.KeyPrefix) + len(id) + len("{}:")
	size := 3*each + len("leaseepochmeta")
	for _, k := range kinds {
		size += each + len(k)
	}
	var b strings.Builder
	b.Grow(size)
	keys := make([]string, 0, 3+len(kinds))
	add := func(kind string) {
		o := b.Len()
		b.WriteString(r.o.KeyPrefix)
		b.WriteByte('{')
		b.WriteString(id)
		b.WriteString("}:")
		b.WriteString(kind)
		keys = append(keys, b.String()[o:])
	}
	add("lease")
	add("epoch")
	add("meta")
	for _, k := range kinds {
		add(k)
	}
	return keys
}

// fencedArgs are a fenced script's first arguments for a write of id,
// then args.
func (r *Redis) fencedArgs(id string, args ...any) []any {
	replica, epoch := r.fences.of(r.id, id)
	return fenceArgv(replica, epoch, args...)
}

// fenceArgv are a fenced script's arguments under the fence replica,
// epoch ("", "": unfenced), then args.
func fenceArgv(replica, epoch string, args ...any) []any {
	return append(fenceArgvRoom(replica, epoch, len(args)), args...)
}

// fenceArgvRoom is fenceArgv's first arguments, with room for n more.
func fenceArgvRoom(replica, epoch string, n int) []any {
	return append(make([]any, 0, 3+n), replica, epoch, orphanTTL.Milliseconds())
}

// isFenced reports the FENCED error of a fenced script.
func isFenced(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "FENCED")
}

// fenced maps a refused write to session.ErrFenced, and forgets the lease
// it was written under.
func (r *Redis) fenced(id string, err error) error {
	if !isFenced(err) {
		return err
	}
	r.fences.lose(id)
	return session.ErrFenced
}
