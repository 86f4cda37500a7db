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
-- ARGV[next]   number of writes W, then W groups:
--                key position, counter position (0 for 'o', which takes no version
--                from the counter), op ('p' put | 'd' delete | 'o' owner alone), index
--                position (0: none here), number of fields P (0 for a
--                delete; for 'o', 1: the pair `p:~own`, its JSON, or 0: no owner), then
--                P pairs: field name (`p:...` or `w:...`), its JSON.
--              A `w:` field goes to the document's record hash, which the script names
--              (KEYS[key position] .. '/~w', in the document's slot).
-- ARGV[#ARGV-1] the owner token: the key group the transaction commits for ('' for none).
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
for _ = 1, checks do
  local at = tonumber(ARGV[pos])
  local want = ARGV[pos + 1]
  checked[#checked + 1] = at
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
  if quick == want then
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
for _, at in ipairs(checked) do
  local text = owners[at]
  if text == nil and had[at] then
    text = redis.pcall('HGET', KEYS[at], 'p:~own')
  end
  local group, until_ms = live_owner(text)
  if group and group ~= token then
    return { 'grouped', at, group, until_ms }
  end
  if token ~= '' and not group and had[at] then
    return { 'lost', at, token }
  end
end

local writes = {}
local count = tonumber(ARGV[pos])
pos = pos + 1
for w = 1, count do
  local props = tonumber(ARGV[pos + 4])
  local at = tonumber(ARGV[pos])
  writes[w] = {
    at = at,
    key = KEYS[at],
    counter_at = tonumber(ARGV[pos + 1]),
    op = ARGV[pos + 2],
    index = tonumber(ARGV[pos + 3]),
    first = pos + 5,
    props = props,
  }
  pos = pos + 5 + 2 * props
end
local ns_len = tonumber(ARGV[#ARGV])
-- The version counters must hold integers, or INCR would fail halfway through (each
-- counter checked once: the writes of one entity group share it).
local counters = {}
for _, w in ipairs(writes) do
  if w.counter_at > 0 and not counters[w.counter_at] then
    counters[w.counter_at] = true
    local value = redis.pcall('GET', KEYS[w.counter_at])
    if type(value) == 'table' or (value and not string.match(value, '^%d+$')) then
      return { 'malformed', w.counter_at, 'a version counter that does not hold an integer' }
    end
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
-- The version each written document has (by key position; false: absent): as checked,
-- then as the writes before leave it.
local current = {}
for _, w in ipairs(writes) do
  current[w.at] = had[w.at] and tonumber(had[w.at]) or false
end
-- Write `w` of op 'o': the owner alone, `p:~own` set (one field pair) or taken out (none),
-- with the next version of the document's own; nothing for an absent document. Its
-- version (0: none) and whether the document existed.
local function own(w)
  if not current[w.at] then
    return 0, 0
  end
  local version = current[w.at] + 1
  current[w.at] = version
  if w.props > 0 then
    redis.call('HSET', w.key, 'v', version, ARGV[w.first], ARGV[w.first + 1])
  else
    redis.call('HSET', w.key, 'v', version)
    redis.call('HDEL', w.key, 'p:~own')
  end
  return version, 1
end
-- Write `w` of op 'p' or 'd': the document replaced whole, or deleted. Its version (0 for a
-- delete) and whether the document existed.
local function replace(w, counter)
  local existed = redis.call('DEL', w.key)
  local had = current[w.at]
  current[w.at] = false
  local record = w.key .. '/~w'
  redis.call('DEL', record)
  local member = string.sub(w.key, ns_len + 1)
  if w.op == 'd' then
    if had and had > (tonumber(redis.call('GET', counter)) or 0) then
      redis.call('SET', counter, had)
    end
    if w.index > 0 then
      redis.call('ZREM', KEYS[w.index], member)
    end
    return 0, existed
  end
  local version = next_version(counter, had)
  current[w.at] = version
  -- In slices, so that no call gets more arguments than Lua's stack allows; `w:` fields
  -- into the record hash; the version with the first slice of values.
  local values, entries = { 'v', version }, {}
  for i = 0, w.props - 1 do
    local field = ARGV[w.first + 2 * i]
    local batch = string.sub(field, 1, 2) == 'w:' and entries or values
    batch[#batch + 1] = field
    batch[#batch + 1] = ARGV[w.first + 2 * i + 1]
    if #batch >= 200 then
      redis.call('HSET', batch == entries and record or w.key, unpack(batch))
      if batch == entries then
        entries = {}
      else
        values = {}
      end
    end
  end
  if #values > 0 then
    redis.call('HSET', w.key, unpack(values))
  end
  if #entries > 0 then
    redis.call('HSET', record, unpack(entries))
  end
  if w.index > 0 and existed == 0 then
    redis.call('ZADD', KEYS[w.index], 0, member)
  end
  return version, existed
end
local out = { 'ok' }
for _, w in ipairs(writes) do
  local version, existed
  if w.op == 'o' then
    version, existed = own(w)
  else
    version, existed = replace(w, KEYS[w.counter_at])
  end
  out[#out + 1] = version
  out[#out + 1] = existed
end
return out
