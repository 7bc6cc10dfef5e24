package credstore

import "github.com/redis/go-redis/v9"

// The Lua scripts of the Redis store. Each state change that must be
// atomic is one script. Every script works on one provider's four keys, all
// with the provider's hash tag so that they share a Cluster slot:
//
//	KEYS[1] <prefix>{prov:<provider>}:creds   HASH id → JSON {s: secret (sealed), src: "config"|"api",
//	                                          b: banked resets, a: auto-redeem 0|1, seed: configured banked resets}
//	KEYS[2] <prefix>{prov:<provider>}:order   ZSET id, score = add sequence (the rotation order)
//	KEYS[3] <prefix>{prov:<provider>}:blocks  HASH id → JSON {u: blocked until (ms, Redis clock), r: reason, e: estimated 0|1};
//	                                          PEXPIRE'd to its latest block, so it vanishes when the last block ends
//	KEYS[4] <prefix>{prov:<provider>}:meta    HASH seq (add sequence), rr (rotation cursor), ver (bumped on every
//	                                          change but rotation), epoch (random, set once: a new epoch means the
//	                                          data was lost and replicas restore it from their local view)
//
// ARGV[1] of every script is a clock offset in milliseconds added to Redis'
// TIME: 0 in production; tests move it forward to expire blocks without
// waiting. Times are Redis' clock (TIME), never a replica's, so a replica
// with a skewed clock cannot unblock a credential early; durations cross
// the wire, never instants.
const luaPrelude = `
local creds, order, blocks, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])

-- active returns the blocks in force by credential id; prune deletes the
-- ones that ended.
local function active(prune)
  local out = {}
  local raw = redis.call('HGETALL', blocks)
  for i = 1, #raw, 2 do
    local b = cjson.decode(raw[i + 1])
    if b.u > now then
      out[raw[i]] = b
    elseif prune then
      redis.call('HDEL', blocks, raw[i])
    end
  end
  return out
end

-- expire makes the blocks key vanish when its latest block ends.
local function expire(bl)
  local latest = 0
  for _, b in pairs(bl) do
    if b.u > latest then latest = b.u end
  end
  if latest > now then
    redis.call('PEXPIRE', blocks, latest - now)
  else
    redis.call('DEL', blocks)
  end
end

-- block sets id's block to now+ms unless it has a later one; a window the
-- provider stated (est 0) replaces an estimated one.
local function block(bl, id, ms, reason, est)
  local u = now + ms
  local old = bl[id]
  if (not old) or u > old.u or (old.e == 1 and est == 0) then
    bl[id] = {u = u, r = reason, e = est}
    redis.call('HSET', blocks, id, cjson.encode(bl[id]))
  end
end

-- nextAvailable is the rotation step: the first id other than skip that is
-- not blocked, from the cursor on; the cursor moves past it.
local function nextAvailable(ids, bl, skip)
  local n = #ids
  if n == 0 then return nil end
  local start = (tonumber(redis.call('HGET', meta, 'rr')) or 0) % n
  for i = 0, n - 1 do
    local idx = (start + i) % n
    local id = ids[idx + 1]
    if id ~= skip and not bl[id] then
      redis.call('HSET', meta, 'rr', idx + 1)
      return id
    end
  end
  return nil
end

local function secret(id)
  return cjson.decode(redis.call('HGET', creds, id)).s
end

local function changed(epoch)
  redis.call('HSETNX', meta, 'epoch', epoch)
  redis.call('HINCRBY', meta, 'ver', 1)
end
`

// pickScript picks the next available credential.
//
//	KEYS: creds, order, blocks, meta
//	ARGV[1] clock offset ms
//	returns {} when the provider has no credentials;
//	        {1, id, sealed secret} for the picked credential;
//	        {0, ms until the earliest block ends} when all are blocked.
var pickScript = redis.NewScript(luaPrelude + `
local ids = redis.call('ZRANGE', order, 0, -1)
if #ids == 0 then return {} end
local bl = active(false)
local id = nextAvailable(ids, bl, '')
if id then return {1, id, secret(id)} end
local earliest = nil
for _, cid in ipairs(ids) do
  local b = bl[cid]
  if b and (not earliest or b.u < earliest) then earliest = b.u end
end
return {0, earliest - now}
`)

// usageLimitedScript is step 7: block a credential, then switch to an
// available sibling, else redeem a banked reset, else report the earliest
// sibling unblock.
//
//	KEYS: creds, order, blocks, meta
//	ARGV[1] clock offset ms, [2] credential id, [3] window ms (> 0),
//	    [4] estimated 0|1, [5] reason, [6] minimum block left to redeem (ms),
//	    [7] epoch to set if there is none
//	returns {-1} when the credential is unknown;
//	        {1, sibling id, sealed secret, ms the credential stays blocked};
//	        {2, redeemed id, sealed secret, ms the credential stays blocked, banked resets left};
//	        {0, ms the credential stays blocked, has sibling 0|1, ms until the earliest sibling frees up}.
var usageLimitedScript = redis.NewScript(luaPrelude + `
local id = ARGV[2]
if redis.call('HEXISTS', creds, id) == 0 then return {-1} end
changed(ARGV[7])
local bl = active(true)
block(bl, id, tonumber(ARGV[3]), ARGV[5], tonumber(ARGV[4]))
local left = bl[id].u - now
local ids = redis.call('ZRANGE', order, 0, -1)
local to = nextAvailable(ids, bl, id)
if to then
  expire(bl)
  return {1, to, secret(to), left}
end
local minLeft = tonumber(ARGV[6])
local cands = {id}
for _, cid in ipairs(ids) do
  if cid ~= id then table.insert(cands, cid) end
end
for _, cid in ipairs(cands) do
  local b = bl[cid]
  if b and b.u - now >= minLeft then
    local rec = cjson.decode(redis.call('HGET', creds, cid))
    if rec.a == 1 and rec.b > 0 then
      rec.b = rec.b - 1
      redis.call('HSET', creds, cid, cjson.encode(rec))
      redis.call('HDEL', blocks, cid)
      bl[cid] = nil
      expire(bl)
      if cid == id then left = 0 end
      return {2, cid, rec.s, left, rec.b}
    end
  end
end
expire(bl)
local has, earliest = 0, nil
for _, cid in ipairs(ids) do
  if cid ~= id then
    has = 1
    local b = bl[cid]
    if b and (not earliest or b.u < earliest) then earliest = b.u end
  end
end
local freeIn = 0
if earliest then freeIn = earliest - now end
return {0, left, has, freeIn}
`)

// blockScript records a block made while Redis was unreachable (the
// reconciler replays them).
//
//	KEYS: creds, order, blocks, meta
//	ARGV[1] clock offset ms, [2] credential id, [3] window ms (> 0),
//	    [4] estimated 0|1, [5] reason, [6] epoch to set if there is none
//	returns {1}, or {0} when the credential is unknown.
var blockScript = redis.NewScript(luaPrelude + `
local id = ARGV[2]
if redis.call('HEXISTS', creds, id) == 0 then return {0} end
changed(ARGV[6])
local bl = active(true)
block(bl, id, tonumber(ARGV[3]), ARGV[5], tonumber(ARGV[4]))
expire(bl)
return {1}
`)

// addScript adds a credential, or updates a configuration one (see
// Store.Add).
//
//	KEYS: creds, order, blocks, meta
//	ARGV[1] clock offset ms, [2] id, [3] sealed secret, [4] source,
//	    [5] banked resets, [6] auto-redeem 0|1, [7] epoch to set if there is none
//	returns {'exists', epoch} when the id is taken;
//	        {'added'|'updated', epoch, banked resets, ms blocked (0: not), reason, estimated 0|1}.
var addScript = redis.NewScript(luaPrelude + `
local id, src, banked = ARGV[2], ARGV[4], tonumber(ARGV[5])
redis.call('HSETNX', meta, 'epoch', ARGV[7])
local epoch = redis.call('HGET', meta, 'epoch')
local raw = redis.call('HGET', creds, id)
local rec, status
if raw then
  rec = cjson.decode(raw)
  if rec.src ~= 'config' or src ~= 'config' then return {'exists', epoch} end
  rec.s, rec.a = ARGV[3], tonumber(ARGV[6])
  rec.b = math.max(0, rec.b + banked - rec.seed)
  rec.seed = banked
  status = 'updated'
else
  rec = {s = ARGV[3], src = src, b = banked, a = tonumber(ARGV[6]), seed = banked}
  redis.call('ZADD', order, redis.call('HINCRBY', meta, 'seq', 1), id)
  redis.call('HDEL', blocks, id)
  status = 'added'
end
redis.call('HSET', creds, id, cjson.encode(rec))
redis.call('HINCRBY', meta, 'ver', 1)
local b = active(false)[id]
if b then return {status, epoch, rec.b, b.u - now, b.r, b.e} end
return {status, epoch, rec.b, 0, '', 0}
`)

// deleteScript deletes an API credential.
//
//	KEYS: creds, order, blocks, meta
//	ARGV[1] clock offset ms, [2] id
//	returns {1} when deleted, {-1} when unknown, {-2} for a configuration credential.
var deleteScript = redis.NewScript(luaPrelude + `
local id = ARGV[2]
local raw = redis.call('HGET', creds, id)
if not raw then return {-1} end
if cjson.decode(raw).src == 'config' then return {-2} end
redis.call('HDEL', creds, id)
redis.call('ZREM', order, id)
redis.call('HDEL', blocks, id)
redis.call('HINCRBY', meta, 'ver', 1)
return {1}
`)

// readScript lists a provider's credentials in rotation order; it writes
// nothing.
//
//	KEYS: creds, order, blocks, meta
//	ARGV[1] clock offset ms, [2] with secrets 0|1, [3] known epoch, [4] known version
//	returns {epoch, version, 0} when epoch and version are the known ones (and the
//	        known epoch is not empty);
//	        else {epoch, version, 1, then per credential: id, source, banked resets,
//	        auto-redeem 0|1, configured banked resets, ms blocked (0: not), reason,
//	        estimated 0|1, sealed secret ('' without secrets)}.
var readScript = redis.NewScript(luaPrelude + `
local epoch = redis.call('HGET', meta, 'epoch') or ''
local ver = redis.call('HGET', meta, 'ver') or '0'
if ARGV[3] ~= '' and epoch == ARGV[3] and ver == ARGV[4] then return {epoch, ver, 0} end
local out = {epoch, ver, 1}
local bl = active(false)
for _, id in ipairs(redis.call('ZRANGE', order, 0, -1)) do
  local rec = cjson.decode(redis.call('HGET', creds, id))
  local b = bl[id]
  local left, reason, est = 0, '', 0
  if b then left, reason, est = b.u - now, b.r, b.e end
  local s = ''
  if ARGV[2] == '1' then s = rec.s end
  for _, v in ipairs({id, rec.src, rec.b, rec.a, rec.seed, left, reason, est, s}) do
    table.insert(out, v)
  end
end
return out
`)

// restoreScript puts back a replica's local view of a provider after Redis
// lost its data (the epoch changed): credentials that are missing are added
// with their banked resets, and blocks are set (the later time wins).
//
//	KEYS: creds, order, blocks, meta
//	ARGV[1] clock offset ms, [2] epoch to set if there is none, [3] the epoch the
//	    replica knew, [4] number of credentials n, then n times 9 values: id, sealed
//	    secret, source, banked resets, auto-redeem 0|1, configured banked resets,
//	    ms blocked (0: not), reason, estimated 0|1
//	returns {epoch, credentials added}; nothing changes when the epoch is
//	    still the known one.
var restoreScript = redis.NewScript(luaPrelude + `
local epoch = redis.call('HGET', meta, 'epoch')
if epoch == ARGV[3] then return {epoch, 0} end
changed(ARGV[2])
epoch = redis.call('HGET', meta, 'epoch')
local bl = active(true)
local added = 0
for i = 0, tonumber(ARGV[4]) - 1 do
  local a = 5 + i * 9
  local id = ARGV[a]
  if redis.call('HEXISTS', creds, id) == 0 then
    local rec = {s = ARGV[a + 1], src = ARGV[a + 2], b = tonumber(ARGV[a + 3]), a = tonumber(ARGV[a + 4]), seed = tonumber(ARGV[a + 5])}
    redis.call('HSET', creds, id, cjson.encode(rec))
    redis.call('ZADD', order, redis.call('HINCRBY', meta, 'seq', 1), id)
    added = added + 1
  end
  local ms = tonumber(ARGV[a + 6])
  if ms > 0 then block(bl, id, ms, ARGV[a + 7], tonumber(ARGV[a + 8])) end
end
expire(bl)
return {epoch, added}
`)
