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
--                key position, counter position, op ('p' put | 'd' delete),
--                index position (0: none here), number of fields P (0 for a
--                delete), then P pairs: field name (`p:...` or `w:...`), its JSON.
--              A `w:` field goes to the document's record hash, which the script names
--              (KEYS[key position] .. '/~w', in the document's slot).
-- ARGV[#ARGV-1] the owner token: the key group the transaction commits for ('' for none).
-- ARGV[#ARGV]  length of the namespace prefix: a document's scan-index member is its
--              Redis key without the namespace (its `Key::encode()`).
--
-- Versions: a put gives a document the next value of its entity group's counter, or one
-- more than the version it replaces if that is larger (merges count a document's version
-- up by themselves, `merge.lua`); a delete raises the counter to the version it deletes.
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
for _ = 1, checks do
  local at = tonumber(ARGV[pos])
  local want = ARGV[pos + 1]
  checked[#checked + 1] = at
  pos = pos + 2
  -- Fast path: the version expected is there (a document whose version a read handed
  -- out is ours); anything else gets the full inspection.
  local quick = want ~= '-' and want ~= '*' and redis.pcall('HGET', KEYS[at], 'v')
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
  local group, until_ms = live_owner(redis.pcall('HGET', KEYS[at], 'p:~own'))
  if group and group ~= token then
    return { 'grouped', at, group, until_ms }
  end
  if token ~= '' and not group and redis.call('EXISTS', KEYS[at]) == 1 then
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
    key = KEYS[at],
    had = had[at] and tonumber(had[at]),
    counter_at = tonumber(ARGV[pos + 1]),
    op = ARGV[pos + 2],
    index = tonumber(ARGV[pos + 3]),
    first = pos + 5,
    props = props,
  }
  pos = pos + 5 + 2 * props
end
local ns_len = tonumber(ARGV[#ARGV])
-- The version counters must hold integers, or INCR would fail halfway through.
for _, w in ipairs(writes) do
  local value = redis.pcall('GET', KEYS[w.counter_at])
  if type(value) == 'table' or (value and not string.match(value, '^%d+$')) then
    return { 'malformed', w.counter_at, 'a version counter that does not hold an integer' }
  end
end
local out = { 'ok' }
for _, w in ipairs(writes) do
  local existed = redis.call('DEL', w.key)
  local record = w.key .. '/~w'
  redis.call('DEL', record)
  local member = string.sub(w.key, ns_len + 1)
  local counter = KEYS[w.counter_at]
  if w.op == 'p' then
    local version = redis.call('INCR', counter)
    if w.had and version <= w.had then
      version = w.had + 1
      redis.call('SET', counter, version)
    end
    redis.call('HSET', w.key, 'v', version)
    -- In slices, so that no call gets more arguments than Lua's stack allows; `w:`
    -- fields into the record hash.
    local values, entries = {}, {}
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
    out[#out + 1] = version
  else
    if w.had and w.had > (tonumber(redis.call('GET', counter)) or 0) then
      redis.call('SET', counter, w.had)
    end
    if w.index > 0 then
      redis.call('ZREM', KEYS[w.index], member)
    end
    out[#out + 1] = 0
  end
  out[#out + 1] = existed
end
return out
