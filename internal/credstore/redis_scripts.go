package credstore

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of the Redis store. Each state change that must be
// atomic is one script. Every script works on one provider's keys, all
// with the provider's hash tag so that they share a Cluster slot. The
// first five are the provider's:
//
//	KEYS[1] <prefix>{prov:<provider>}:creds   HASH id → JSON {s: secret (sealed), src: "config"|"api",
//	                                          b: banked resets, a: auto-redeem 0|1, seed: configured banked resets,
//	                                          acct: account (absent when the credential names none)}
//	KEYS[2] <prefix>{prov:<provider>}:order   ZSET id, score = add sequence (the rotation order)
//	KEYS[3] <prefix>{prov:<provider>}:blocks  HASH id → JSON {u: blocked until (ms, Redis clock), r: reason, e: estimated 0|1};
//	                                          PEXPIRE'd to its latest block, so it vanishes when the last block ends
//	KEYS[4] <prefix>{prov:<provider>}:meta    HASH seq (add sequence), rr (the server pool's rotation cursor),
//	                                          rr:<tenant> (a tenant's own pool's), ver (bumped on every change of
//	                                          any owner's credentials but rotation), epoch (random, set once: a new
//	                                          epoch means the data was lost and replicas restore it from their
//	                                          local view)
//	KEYS[5] <prefix>{prov:<provider>}:owners  SET the tenants that own credentials of the provider
//
// The first three hold the server's credentials. A tenant's own
// credentials of the provider have three keys of the same forms, given
// after those five (KEYS[6..8] for the tenant a script serves; readScript
// and restoreScript take several tenants, three keys each):
//
//	<prefix>{prov:<provider>}:own:<tenant>:creds, …:order, …:blocks
//
// ARGV[1] of every script is a clock offset in milliseconds added to Redis'
// TIME: 0 in production; tests move it forward to expire blocks without
// waiting. ARGV[2] is the tenant whose pool the script works on ("" for
// the server's alone). Times are Redis' clock (TIME), never a replica's, so
// a replica with a skewed clock cannot unblock a credential early;
// durations cross the wire, never instants.
const luaPrelude = `
local meta, owners = KEYS[4], KEYS[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])

-- pool is one owner's credentials of the provider: keys from KEYS[i] on.
local function pool(i, name)
  local rr = 'rr'
  if name ~= '' then rr = 'rr:' .. name end
  return {creds = KEYS[i], order = KEYS[i + 1], blocks = KEYS[i + 2], name = name, rr = rr}
end
local server = pool(1, '')
-- own is the pool of ARGV[2]'s tenant (nil for the server's alone).
local own = nil
if ARGV[2] ~= '' then own = pool(6, ARGV[2]) end

local function ids(p)
  if not p then return {} end
  return redis.call('ZRANGE', p.order, 0, -1)
end

-- active returns p's blocks in force by credential id; prune deletes the
-- ones that ended.
local function active(p, prune)
  local out = {}
  if not p then return out end
  local raw = redis.call('HGETALL', p.blocks)
  for i = 1, #raw, 2 do
    local b = cjson.decode(raw[i + 1])
    if b.u > now then
      out[raw[i]] = b
    elseif prune then
      redis.call('HDEL', p.blocks, raw[i])
    end
  end
  return out
end

-- expire makes p's blocks key vanish when its latest block ends.
local function expire(p, bl)
  local latest = 0
  for _, b in pairs(bl) do
    if b.u > latest then latest = b.u end
  end
  if latest > now then
    redis.call('PEXPIRE', p.blocks, latest - now)
  else
    redis.call('DEL', p.blocks)
  end
end

-- block sets id's block to now+ms unless it has a later one; a window the
-- provider stated (est 0) replaces an estimated one.
local function block(p, bl, id, ms, reason, est)
  local u = now + ms
  local old = bl[id]
  if (not old) or u > old.u or (old.e == 1 and est == 0) then
    bl[id] = {u = u, r = reason, e = est}
    redis.call('HSET', p.blocks, id, cjson.encode(bl[id]))
  end
end

-- set makes a lookup table of a list.
local function set(list)
  local out = {}
  for _, v in ipairs(list) do out[v] = true end
  return out
end

-- nextAvailable is p's rotation step: the first id other than skip that is
-- neither blocked nor hidden, from p's cursor on; the cursor moves past it.
local function nextAvailable(p, list, bl, skip, hidden)
  local n = #list
  if n == 0 then return nil end
  local start = (tonumber(redis.call('HGET', meta, p.rr)) or 0) % n
  for i = 0, n - 1 do
    local idx = (start + i) % n
    local id = list[idx + 1]
    if id ~= skip and not bl[id] and not hidden[id] then
      redis.call('HSET', meta, p.rr, idx + 1)
      return id
    end
  end
  return nil
end

local function secret(p, id)
  return cjson.decode(redis.call('HGET', p.creds, id)).s
end

-- account is id's account as stored ('' when it names none).
local function account(p, id)
  return cjson.decode(redis.call('HGET', p.creds, id)).acct or ''
end

local function changed(epoch)
  redis.call('HSETNX', meta, 'epoch', epoch)
  redis.call('HINCRBY', meta, 'ver', 1)
end

-- isOwn is 1 for the tenant's own pool, 0 for the server's.
local function isOwn(p)
  if p == server then return 0 end
  return 1
end

-- home is the pool of credential id in the tenant's pool: its own, else
-- the server's (nil when neither has it).
local function home(id)
  if own and redis.call('HEXISTS', own.creds, id) == 1 then return own end
  if redis.call('HEXISTS', server.creds, id) == 1 then return server end
  return nil
end
`

// pickScript picks the next available credential of a tenant's pool: its
// own first, then the server's that its own do not shadow (same id).
//
//	KEYS: the provider's five, then the tenant's three (none for the server's pool)
//	ARGV[1] clock offset ms, [2] tenant ('' for the server's pool), [3]
//	    the credential to keep when it is in the pool and available, a
//	    server credential only while none of the tenant's own is (''
//	    or absent: none; the rotation does not move for it)
//	returns {} when the pool has no credentials;
//	        {1, id, sealed secret, own 0|1, account} for the picked credential;
//	        {0, ms until the earliest block ends} when all are blocked.
var pickScript = redis.NewScript(luaPrelude + `
local oids = ids(own)
local sids = redis.call('ZRANGE', server.order, 0, -1)
if #oids == 0 and #sids == 0 then return {} end
local prefer = ARGV[3] or ''
if prefer ~= '' then
  local h = home(prefer)
  local keep = h and not active(h, false)[prefer]
  if keep and h == server and own then
    -- a server credential only while none of the tenant's own is available
    local obl = active(own, false)
    for _, cid in ipairs(oids) do
      if not obl[cid] then keep = false end
    end
  end
  if keep then
    return {1, prefer, secret(h, prefer), isOwn(h), account(h, prefer)}
  end
end
local obl = {}
if #oids > 0 then
  obl = active(own, false)
  local id = nextAvailable(own, oids, obl, '', {})
  if id then return {1, id, secret(own, id), 1, account(own, id)} end
end
local shadow = set(oids)
local sbl = active(server, false)
local id = nextAvailable(server, sids, sbl, '', shadow)
if id then return {1, id, secret(server, id), 0, account(server, id)} end
local earliest = nil
for _, cid in ipairs(oids) do
  local b = obl[cid]
  if b and (not earliest or b.u < earliest) then earliest = b.u end
end
for _, cid in ipairs(sids) do
  local b = sbl[cid]
  if b and not shadow[cid] and (not earliest or b.u < earliest) then earliest = b.u end
end
return {0, earliest - now}
`)

// usageLimitedScript is step 7 in a tenant's pool: block a credential,
// then switch to an available sibling of the pool, else redeem a banked
// reset, else report the earliest sibling unblock.
//
//	KEYS: the provider's five, then the tenant's three (none for the server's pool), then the call's once key
//	ARGV[1] clock offset ms, [2] tenant, [3] credential id, [4] window ms (> 0),
//	    [5] estimated 0|1, [6] reason, [7] minimum block left to redeem (ms),
//	    [8] epoch to set if there is none
//	returns {-1} when the pool has no such credential;
//	        {1, sibling id, sealed secret, ms the credential stays blocked, sibling own 0|1, credential own 0|1, sibling account};
//	        {2, redeemed id, sealed secret, ms the credential stays blocked, banked resets left, redeemed own 0|1, credential own 0|1,
//	            redeemed account};
//	        {0, ms the credential stays blocked, has sibling 0|1, ms until the earliest sibling frees up, credential own 0|1}.
var usageLimitedScript = redis.NewScript(once(`
local id = ARGV[3]
local h = home(id)
if not h then return {-1} end
changed(ARGV[8])
local oids = ids(own)
local sids = redis.call('ZRANGE', server.order, 0, -1)
local shadow = set(oids)
local obl = active(own, h == own)
local sbl = active(server, h == server)
local hbl = sbl
if h == own then hbl = obl end
block(h, hbl, id, tonumber(ARGV[4]), ARGV[6], tonumber(ARGV[5]))
local left = hbl[id].u - now
local hown = isOwn(h)
local to, tp = nil, nil
if own then to, tp = nextAvailable(own, oids, obl, id, {}), own end
if not to then to, tp = nextAvailable(server, sids, sbl, id, shadow), server end
if to then
  expire(h, hbl)
  return {1, to, secret(tp, to), left, isOwn(tp), hown, account(tp, to)}
end
local minLeft = tonumber(ARGV[7])
local cands = {{h, hbl, id}}
for _, cid in ipairs(oids) do
  if cid ~= id then table.insert(cands, {own, obl, cid}) end
end
for _, cid in ipairs(sids) do
  if cid ~= id and not shadow[cid] then table.insert(cands, {server, sbl, cid}) end
end
for _, c in ipairs(cands) do
  local p, bl, cid = c[1], c[2], c[3]
  local b = bl[cid]
  if b and b.u - now >= minLeft then
    local rec = cjson.decode(redis.call('HGET', p.creds, cid))
    if rec.a == 1 and rec.b > 0 then
      rec.b = rec.b - 1
      redis.call('HSET', p.creds, cid, cjson.encode(rec))
      redis.call('HDEL', p.blocks, cid)
      bl[cid] = nil
      expire(h, hbl)
      if p ~= h then expire(p, bl) end
      if p == h and cid == id then left = 0 end
      return {2, cid, rec.s, left, rec.b, isOwn(p), hown, rec.acct or ''}
    end
  end
end
expire(h, hbl)
local has, earliest = 0, nil
for _, c in ipairs(cands) do
  if c[3] ~= id or c[1] ~= h then
    has = 1
    local b = c[2][c[3]]
    if b and (not earliest or b.u < earliest) then earliest = b.u end
  end
end
local freeIn = 0
if earliest then freeIn = earliest - now end
return {0, left, has, freeIn, hown}
`))

// blockScript records a block made while Redis was unreachable (the
// reconciler replays them), in a tenant's pool.
//
//	KEYS: the provider's five, then the tenant's three (none for the server's pool)
//	ARGV[1] clock offset ms, [2] tenant, [3] credential id, [4] window ms (> 0),
//	    [5] estimated 0|1, [6] reason, [7] epoch to set if there is none
//	returns {1}, or {0} when the pool has no such credential.
var blockScript = redis.NewScript(luaPrelude + `
local id = ARGV[3]
local h = home(id)
if not h then return {0} end
changed(ARGV[7])
local bl = active(h, true)
block(h, bl, id, tonumber(ARGV[4]), ARGV[6], tonumber(ARGV[5]))
expire(h, bl)
return {1}
`)

// addScript adds a credential of an owner, or updates a configuration one
// (see Store.Add).
//
//	KEYS: the provider's five, then the owner's three (none for a server credential), then the call's once key
//	ARGV[1] clock offset ms, [2] owner ('' for the server), [3] id, [4] sealed secret,
//	    [5] source, [6] banked resets, [7] auto-redeem 0|1, [8] epoch to set if there is none,
//	    [9] account ('' for none), [10] the most credentials a tenant owner may have of the provider (0: no bound)
//	returns {'exists', epoch} when the id is taken (by the owner, or by a
//	        server credential for a tenant owner);
//	        {'limit', epoch} when a tenant owner has as many as [10];
//	        {'added'|'updated', epoch, banked resets, ms blocked (0: not), reason, estimated 0|1}.
var addScript = redis.NewScript(once(`
local p = server
if own then p = own end
local id, src, banked = ARGV[3], ARGV[5], tonumber(ARGV[6])
redis.call('HSETNX', meta, 'epoch', ARGV[8])
local epoch = redis.call('HGET', meta, 'epoch')
if own and redis.call('HEXISTS', server.creds, id) == 1 then return {'exists', epoch} end
local raw = redis.call('HGET', p.creds, id)
local rec, status
if raw then
  rec = cjson.decode(raw)
  if rec.src ~= 'config' or src ~= 'config' then return {'exists', epoch} end
  rec.s, rec.a = ARGV[4], tonumber(ARGV[7])
  rec.acct = nil
  rec.b = math.max(0, rec.b + banked - rec.seed)
  rec.seed = banked
  status = 'updated'
else
  local most = tonumber(ARGV[10])
  if own and most > 0 and redis.call('HLEN', own.creds) >= most then return {'limit', epoch} end
  rec = {s = ARGV[4], src = src, b = banked, a = tonumber(ARGV[7]), seed = banked}
  redis.call('ZADD', p.order, redis.call('HINCRBY', meta, 'seq', 1), id)
  redis.call('HDEL', p.blocks, id)
  if own then redis.call('SADD', owners, own.name) end
  status = 'added'
end
if ARGV[9] ~= '' then rec.acct = ARGV[9] end
redis.call('HSET', p.creds, id, cjson.encode(rec))
redis.call('HINCRBY', meta, 'ver', 1)
local b = active(p, false)[id]
if b then return {status, epoch, rec.b, b.u - now, b.r, b.e} end
return {status, epoch, rec.b, 0, '', 0}
`))

// deleteScript deletes an owner's API credential.
//
//	KEYS: the provider's five, then the owner's three (none for a server credential), then the call's once key
//	ARGV[1] clock offset ms, [2] owner ('' for the server), [3] id
//	returns {1} when deleted, {-1} when unknown, {-2} for a configuration
//	        credential, {-3} when a tenant owner has no such id but the server does.
var deleteScript = redis.NewScript(once(`
local p = server
if own then p = own end
local id = ARGV[3]
local raw = redis.call('HGET', p.creds, id)
if not raw then
  if own and redis.call('HEXISTS', server.creds, id) == 1 then return {-3} end
  return {-1}
end
if cjson.decode(raw).src == 'config' then return {-2} end
redis.call('HDEL', p.creds, id)
redis.call('ZREM', p.order, id)
redis.call('HDEL', p.blocks, id)
if own and redis.call('ZCARD', own.order) == 0 then
  redis.call('SREM', owners, own.name)
  redis.call('HDEL', meta, own.rr)
end
redis.call('HINCRBY', meta, 'ver', 1)
return {1}
`))

// readScript lists a provider's credentials: the server's, then those of
// the tenants given, each in rotation order; it writes nothing.
//
//	KEYS: the provider's five, then three per tenant given
//	ARGV[1] clock offset ms, [2] '', [3] with secrets 0|1, [4] known epoch, [5] known version,
//	    [6] the tenants given must be every owner 0|1, [7…] the tenants (sorted)
//	returns {epoch, version, 0} when epoch and version are the known ones (and the
//	        known epoch is not empty);
//	        {epoch, version, 2, then every owner, sorted} when [6] is 1 and the
//	        tenants given are not the owners (call again with those);
//	        else {epoch, version, 1, then per credential: owner ('' for the server),
//	        id, source, banked resets, auto-redeem 0|1, configured banked resets,
//	        ms blocked (0: not), reason, estimated 0|1, sealed secret ('' without secrets),
//	        account ('' for none)}.
var readScript = redis.NewScript(luaPrelude + `
local epoch = redis.call('HGET', meta, 'epoch') or ''
local ver = redis.call('HGET', meta, 'ver') or '0'
if ARGV[4] ~= '' and epoch == ARGV[4] and ver == ARGV[5] then return {epoch, ver, 0} end
if ARGV[6] == '1' then
  local members = redis.call('SMEMBERS', owners)
  table.sort(members)
  local same = #members == #ARGV - 6
  for i, m in ipairs(members) do
    if ARGV[6 + i] ~= m then same = false end
  end
  if not same then
    local out = {epoch, ver, 2}
    for _, m in ipairs(members) do table.insert(out, m) end
    return out
  end
end
local out = {epoch, ver, 1}
local function list(p)
  local bl = active(p, false)
  for _, id in ipairs(redis.call('ZRANGE', p.order, 0, -1)) do
    local rec = cjson.decode(redis.call('HGET', p.creds, id))
    local b = bl[id]
    local left, reason, est = 0, '', 0
    if b then left, reason, est = b.u - now, b.r, b.e end
    local s = ''
    if ARGV[3] == '1' then s = rec.s end
    for _, v in ipairs({p.name, id, rec.src, rec.b, rec.a, rec.seed, left, reason, est, s, rec.acct or ''}) do
      table.insert(out, v)
    end
  end
end
list(server)
for i = 7, #ARGV do
  list(pool(6 + (i - 7) * 3, ARGV[i]))
end
return out
`)

// restoreScript puts back a replica's local view of a provider after Redis
// lost its data (the epoch changed): credentials that are missing are added
// with their banked resets, and blocks are set (the later time wins).
//
//	KEYS: the provider's five, then three per tenant given
//	ARGV[1] clock offset ms, [2] '', [3] epoch to set if there is none, [4] the epoch the
//	    replica knew, [5] number of tenants m, [6…5+m] the tenants, then the number of
//	    credentials n, then n times 11 values: owner (0: the server, i: the i-th tenant),
//	    id, sealed secret, source, banked resets, auto-redeem 0|1, configured banked
//	    resets, ms blocked (0: not), reason, estimated 0|1, account ('' for none)
//	returns {epoch, credentials added}; nothing changes when the epoch is
//	    still the known one.
var restoreScript = redis.NewScript(luaPrelude + `
local epoch = redis.call('HGET', meta, 'epoch')
if epoch == ARGV[4] then return {epoch, 0} end
changed(ARGV[3])
epoch = redis.call('HGET', meta, 'epoch')
local m = tonumber(ARGV[5])
local pools, bls = {[0] = server}, {[0] = active(server, true)}
for i = 1, m do
  pools[i] = pool(3 + 3 * i, ARGV[5 + i])
  bls[i] = active(pools[i], true)
end
local added = 0
local n = tonumber(ARGV[6 + m])
for i = 0, n - 1 do
  local a = 7 + m + i * 11
  local o = tonumber(ARGV[a])
  local p, bl, id = pools[o], bls[o], ARGV[a + 1]
  if redis.call('HEXISTS', p.creds, id) == 0 then
    local rec = {s = ARGV[a + 2], src = ARGV[a + 3], b = tonumber(ARGV[a + 4]), a = tonumber(ARGV[a + 5]), seed = tonumber(ARGV[a + 6])}
    if ARGV[a + 10] ~= '' then rec.acct = ARGV[a + 10] end
    redis.call('HSET', p.creds, id, cjson.encode(rec))
    redis.call('ZADD', p.order, redis.call('HINCRBY', meta, 'seq', 1), id)
    if o > 0 then redis.call('SADD', owners, p.name) end
    added = added + 1
  end
  local ms = tonumber(ARGV[a + 7])
  if ms > 0 then block(p, bl, id, ms, ARGV[a + 8], tonumber(ARGV[a + 9])) end
end
for i = 0, m do expire(pools[i], bls[i]) end
return {epoch, added}
`)

// onceTTL is how long a script's reply is kept for the same call run
// again (ms): go-redis sends a command again at once, within the store's
// timeout.
const onceTTL = 60000

// once makes a script that changes state safe to run twice: go-redis sends
// a command again on a new connection when the connection dropped before
// the reply came, and the first run may have happened (a redeem would
// spend two banked resets, an add would answer "exists", a delete "not
// found"). The call's last key is a key of its own (Redis.onceKey, in the
// provider's slot): the first run keeps its reply there for onceTTL, and a
// run that finds it answers that reply and changes nothing. body is the
// script after the prelude; its replies are flat arrays of strings and
// integers, as cjson keeps them.
func once(body string) string {
	return luaPrelude + `
local onceKey = KEYS[#KEYS]
local done = redis.call('GET', onceKey)
if done then return cjson.decode(done) end
local function body()
` + body + `
end
local reply = body()
redis.call('SET', onceKey, cjson.encode(reply), 'PX', ` + strconv.Itoa(onceTTL) + `)
return reply
`
}
