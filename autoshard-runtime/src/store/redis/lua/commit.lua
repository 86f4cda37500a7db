-- autoshard: apply an optimistic transaction atomically (server side, no WATCH).
--
-- A document is a Redis hash: field `v` holds its version, each property `name` is a
-- field `p:name` holding that property's JSON, except the write record `~w`, whose entry
-- for each writer is a field `w:<writer>` holding `[seq,at_ms]` in the document's
-- *record hash*, the document's key followed by `/~w` (the same hash tag, so the same
-- cluster slot): a load reads the values without the records, and a merge reads and
-- writes one entry, not the whole record. A document written by an earlier layout may
-- still hold `w:` fields itself; they are read, and dropped at its next put.
--
-- KEYS: every Redis key the call touches (documents, version counters, scan indexes),
-- each once; ARGV refers to them by 1-based position.
-- ARGV[1]      number of checks C, then C pairs:
--                key position, expectation: '-' must be absent, '*' only has to be
--                ours (or absent), anything else: the version it must have.
-- ARGV[next]   number of owner texts O, then O texts: the JSON of each owner the writes
--              of op 'o' set (a key group's writes all name the same one).
-- ARGV[next]   number of writes W, then W groups, each starting with its op:
--                'o' (the owner alone): key position, owner (1-based among the owner
--                  texts; 0: take the owner out);
--                'p' (put) | 'u' (the values, keeping the record) | 'd' (delete): key
--                  position, counter position, index position (0: none here), number
--                  of fields P (0 for a delete), then P pairs: field name (`p:...` or
--                  `w:...`), its JSON.
--              A `w:` field goes to the document's record hash, which the script names
--              (KEYS[key position] .. '/~w', in the document's slot). A put replaces the
--              record hash; a values write keeps it (and `w:` fields an earlier layout
--              left in the document) and sets the `w:` fields it carries.
-- ARGV[#ARGV-1] the owner token: '=' followed by the key group the transaction commits
--              for ('' for none: a group's id may be empty).
-- ARGV[#ARGV]  length of the namespace prefix: a document's scan-index member is its
--              Redis key without the namespace (its `Key::encode()`).
--
-- Versions: a put gives a document the next value of its entity group's counter, or one
-- more than the version it replaces if that is larger; an owner write, like a merge
-- (`merge.lua`), counts the document's version up by itself (it never creates one); a
-- delete raises the counter to the version it deletes.
-- So every version a key gets is larger than every version it had, across deletes too,
-- and none comes back (the store contract). Versions stay far below 2^53, where Lua
-- numbers are exact.
--
-- Every check runs before the first write: a Lua error does not roll back the writes
-- made before it, so nothing below may fail once writing has started.
--
-- Every key checked also passes the ownership rule of `store/ownership.rs` (by the
-- server's clock; `live_owner`, in `owner.lua`, which `mod.rs` puts before this script):
-- without a token, no document a live key group owns; with one, only
-- documents that group owns (or absent ones).
--
-- Reply: {'ok', version_1, existed_1, ..., version_W, existed_W}
--        {'conflict', key position} | {'malformed', key position, reason}
--        {'grouped', key position, group, until_ms} | {'lost', key position, group}

-- The version of an autoshard document at `key`, false when absent, or nil and why the
-- value there is not ours.
local function inspect(key)
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then
    return false
  end
  local reason = 'a Redis hash that is not an autoshard document (a version `v`, `p:` and `w:` fields)'
  if t ~= 'hash' then
    return nil, 'a Redis ' .. t .. ' value, not an autoshard document'
  end
  local version = redis.call('HGET', key, 'v')
  if not version or not string.match(version, '^%d+$') then
    return nil, reason
  end
  if not countable(version) then
    return nil, UNCOUNTABLE
  end
  for _, name in ipairs(redis.call('HKEYS', key)) do
    local prefix = string.sub(name, 1, 2)
    if name ~= 'v' and prefix ~= 'p:' and prefix ~= 'w:' then
      return nil, reason
    end
  end
  return version
end

local pos = 1
local checks = tonumber(ARGV[pos])
pos = pos + 1
local checked = {}
-- The version each checked document has (false: absent), by key position.
local had = {}
-- The owner field (`p:~own`, false: none) of the checked documents the fast path read.
local owners = {}
for c = 1, checks do
  local at = tonumber(ARGV[pos])
  local want = ARGV[pos + 1]
  checked[c] = at
  pos = pos + 2
  -- Fast path: the version expected is there (a document whose version a read handed
  -- out is ours), read with the owner; anything else gets the full inspection.
  local quick
  if want ~= '-' and want ~= '*' then
    local got = redis.pcall('HMGET', KEYS[at], 'v', 'p:~own')
    if type(got) == 'table' and not got['err'] then
      quick = got[1]
      if quick == want then
        owners[at] = got[2]
      end
    end
  end
  if quick == want and countable(want) then
    had[at] = want
  else
    local have, reason = inspect(KEYS[at])
    if have == nil then
      return { 'malformed', at, reason }
    end
    if want == '-' then
      if have then
        return { 'conflict', at }
      end
    elseif want ~= '*' then
      return { 'conflict', at }
    end
    had[at] = have
  end
end

local token = ARGV[#ARGV - 1]
local tokened = token ~= ''
token = string.sub(token, 2)
for _, at in ipairs(checked) do
  local text = owners[at]
  if text == nil and had[at] then
    text = redis.pcall('HGET', KEYS[at], 'p:~own')
  end
  local group, until_ms = live_owner(text)
  if group and (not tokened or group ~= token) then
    return { 'grouped', at, group, lease_text(until_ms) }
  end
  if tokened and not group and had[at] then
    return { 'lost', at, token }
  end
end

local owner_texts = {}
for i = 1, tonumber(ARGV[pos]) do
  owner_texts[i] = ARGV[pos + i]
end
pos = pos + 1 + #owner_texts
local count = tonumber(ARGV[pos])
local first_write = pos + 1
local ns_len = tonumber(ARGV[#ARGV])
-- The version counters must hold integers, or INCR would fail halfway through (each
-- counter checked once: the writes of one entity group share it). No table per write:
-- the writes are read from ARGV again below.
local counters = {}
pos = first_write
for _ = 1, count do
  if ARGV[pos] == 'o' then
    pos = pos + 3
  else
    -- The record hash is reached without being given (the document's key and `/~w`). On
    -- a cluster such a key answers an error once it has moved away with a migrating
    -- slot, and a put or a delete would meet that error after deleting the document:
    -- so it is touched here, before the first write, and the script fails with
    -- `TRYAGAIN`, which the client sends again once the slot has moved.
    local at = tonumber(ARGV[pos + 1])
    local record = KEYS[at] .. '/~w'
    local t = redis.pcall('TYPE', record)
    if t.err then
      if string.find(t.err, 'non local key', 1, true) then
        error({ err = 'TRYAGAIN `' .. record .. '` is moving with its slot' })
      end
      error(t)
    end
    -- A values write keeps the record hash and takes `HSET`s: it must be a hash, or absent.
    if ARGV[pos] == 'u' and t['ok'] ~= 'none' and t['ok'] ~= 'hash' then
      return { 'malformed', at, 'a Redis ' .. t['ok'] .. ' value where its write record belongs' }
    end
    local counter_at = tonumber(ARGV[pos + 2])
    if not counters[counter_at] then
      counters[counter_at] = true
      local value = redis.pcall('GET', KEYS[counter_at])
      if type(value) == 'table' or (value and not string.match(value, '^%d+$')) then
        return { 'malformed', counter_at, 'a version counter that does not hold an integer' }
      end
      if value and not countable(value) then
        return { 'malformed', counter_at, 'a version counter holding ' .. UNCOUNTABLE }
      end
    end
    pos = pos + 5 + 2 * tonumber(ARGV[pos + 4])
  end
end
-- The next version of a document that had version `had` (nil: absent), from `counter`.
local function next_version(counter, had)
  local version = redis.call('INCR', counter)
  if had and version <= had then
    version = had + 1
    redis.call('SET', counter, version)
  end
  return version
end
-- The version each document written so far has (by key position; false: absent);
-- `version_now` answers it, or the version checked for one not written yet.
local current = {}
local function version_now(at)
  local version = current[at]
  if version == nil then
    version = had[at] and tonumber(had[at]) or false
  end
  return version
end
-- A write of op 'o' to the document at key position `at`: the owner alone, `p:~own` set
-- to owner text `owner` or taken out (0), with the next version of the document's own;
-- nothing for an absent document. Its version (0: none) and whether the document existed.
local function own(at, owner)
  local had = version_now(at)
  if not had then
    return 0, 0
  end
  local version = had + 1
  current[at] = version
  if owner > 0 then
    redis.call('HSET', KEYS[at], 'v', version, 'p:~own', owner_texts[owner])
  else
    redis.call('HSET', KEYS[at], 'v', version)
    redis.call('HDEL', KEYS[at], 'p:~own')
  end
  return version, 1
end
-- A write of op 'p', 'u' or 'd' (`op`) to the document at key position `at`, its group's
-- counter and scan index at `counter_at` and `index` (0: none), its P = `props` field
-- pairs from ARGV[first]: the document replaced whole (with its record, or its values
-- alone: 'u'), or deleted. Its version (0 for a delete) and whether the document existed.
local function replace(op, at, counter_at, index, first, props)
  local key, counter = KEYS[at], KEYS[counter_at]
  local had = version_now(at)
  current[at] = false
  local existed
  local record = key .. '/~w'
  if op == 'u' then
    existed = redis.call('EXISTS', key)
    local values = {}
    for _, name in ipairs(redis.call('HKEYS', key)) do
      if string.sub(name, 1, 2) == 'p:' then
        values[#values + 1] = name
        if #values >= 200 then
          redis.call('HDEL', key, unpack(values))
          values = {}
        end
      end
    end
    if #values > 0 then
      redis.call('HDEL', key, unpack(values))
    end
  else
    existed = redis.call('DEL', key)
    redis.call('DEL', record)
  end
  local member = string.sub(key, ns_len + 1)
  if op == 'd' then
    if had and had > (tonumber(redis.call('GET', counter)) or 0) then
      redis.call('SET', counter, had)
    end
    if index > 0 then
      redis.call('ZREM', KEYS[index], member)
    end
    return 0, existed
  end
  local version = next_version(counter, had)
  current[at] = version
  -- In slices, so that no call gets more arguments than Lua's stack allows; `w:` fields
  -- into the record hash; the version with the first slice of values.
  local values, entries = { 'v', version }, {}
  for i = 0, props - 1 do
    local field = ARGV[first + 2 * i]
    local batch = string.sub(field, 1, 2) == 'w:' and entries or values
    batch[#batch + 1] = field
    batch[#batch + 1] = ARGV[first + 2 * i + 1]
    if #batch >= 200 then
      redis.call('HSET', batch == entries and record or key, unpack(batch))
      if batch == entries then
        entries = {}
      else
        values = {}
      end
    end
  end
  if #values > 0 then
    redis.call('HSET', key, unpack(values))
  end
  if #entries > 0 then
    redis.call('HSET', record, unpack(entries))
  end
  if index > 0 and existed == 0 then
    redis.call('ZADD', KEYS[index], 0, member)
  end
  return version, existed
end
local out = { 'ok' }
pos = first_write
for w = 1, count do
  local op, at = ARGV[pos], tonumber(ARGV[pos + 1])
  local version, existed
  if op == 'o' then
    version, existed = own(at, tonumber(ARGV[pos + 2]))
    pos = pos + 3
  else
    local props = tonumber(ARGV[pos + 4])
    version, existed = replace(op, at, tonumber(ARGV[pos + 2]), tonumber(ARGV[pos + 3]), pos + 5, props)
    pos = pos + 5 + 2 * props
  end
  out[2 * w] = version
  out[2 * w + 1] = existed
end
return out
