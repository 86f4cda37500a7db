-- autoshard: apply an optimistic transaction atomically (server side, no WATCH).
--
-- KEYS: every Redis key the call touches (documents, version counters, scan indexes),
-- each once; ARGV refers to them by 1-based position.
-- ARGV[1]      number of checks C, then C pairs:
--                key position, expectation: '-' must be absent, '*' only has to be
--                ours (or absent), anything else: the version it must have.
-- ARGV[next]   number of writes W, then W groups of five:
--                key position, counter position, op ('p' put | 'd' delete),
--                document JSON ('' for a delete), index position (0: none here).
-- ARGV[last]   length of the namespace prefix: a document's scan-index member is its
--              Redis key without the namespace (its `Key::encode()`).
--
-- Every check runs before the first write: a Lua error does not roll back the writes
-- made before it, so nothing below may fail once writing has started.
--
-- Reply: {'ok', version_1, existed_1, ..., version_W, existed_W}
--        {'conflict', key position} | {'malformed', key position, reason}

local function inspect(key)
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then
    return false
  end
  if t ~= 'hash' then
    return nil, 'a Redis ' .. t .. ' value, not an autoshard document'
  end
  local f = redis.call('HMGET', key, 'v', 'd')
  if not f[1] or not f[2] or not string.match(f[1], '^%d+$') then
    return nil, 'a Redis hash without the autoshard fields `v` and `d`'
  end
  return f[1]
end

local pos = 1
local checks = tonumber(ARGV[pos])
pos = pos + 1
for _ = 1, checks do
  local at = tonumber(ARGV[pos])
  local want = ARGV[pos + 1]
  pos = pos + 2
  local have, reason = inspect(KEYS[at])
  if have == nil then
    return { 'malformed', at, reason }
  end
  if want == '-' then
    if have then
      return { 'conflict', at }
    end
  elseif want ~= '*' then
    if have ~= want then
      return { 'conflict', at }
    end
  end
end

local writes = tonumber(ARGV[pos])
pos = pos + 1
local ns_len = tonumber(ARGV[pos + 5 * writes])
-- The version counters must hold integers, or INCR would fail halfway through.
for w = 0, writes - 1 do
  local at = tonumber(ARGV[pos + 5 * w + 1])
  local t = redis.call('TYPE', KEYS[at])['ok']
  if t ~= 'none' and (t ~= 'string' or not string.match(redis.call('GET', KEYS[at]), '^%d+$')) then
    return { 'malformed', at, 'a version counter that does not hold an integer' }
  end
end
local out = { 'ok' }
for _ = 1, writes do
  local key = KEYS[tonumber(ARGV[pos])]
  local counter = KEYS[tonumber(ARGV[pos + 1])]
  local op = ARGV[pos + 2]
  local body = ARGV[pos + 3]
  local index = tonumber(ARGV[pos + 4])
  pos = pos + 5
  local existed = redis.call('EXISTS', key)
  local member = string.sub(key, ns_len + 1)
  if op == 'p' then
    local version = redis.call('INCR', counter)
    redis.call('HSET', key, 'v', version, 'd', body)
    if index > 0 then
      redis.call('ZADD', KEYS[index], 0, member)
    end
    out[#out + 1] = version
  else
    redis.call('DEL', key)
    if index > 0 then
      redis.call('ZREM', KEYS[index], member)
    end
    out[#out + 1] = 0
  end
  out[#out + 1] = existed
end
return out
