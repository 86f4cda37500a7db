-- autoshard: read documents, or one scan page, or both, in one atomic step (server
-- side, so a foreign value is reported, not an error).
--
-- ARGV[1] is `1` to answer documents with their write record (`w:` fields), `0` to
-- leave it out; then one of three call forms:
--   read   KEYS: the documents to read.  ARGV[2..]: none.
--          Reply: one entry per key, in order.
--   scan   KEYS: {index}, a sorted set of encoded document keys (scores 0).
--          ARGV[2..]: {'scan', prefix, min, limit, all}: the namespace prefix of
--          document names, the ZRANGEBYLEX start (`-` or `(cursor`), the page size, and
--          `1` to read every member's document here, or `0` to read only the members in
--          the index's own hash tag (on a cluster a script may touch no other slot).
--          Reply: {members, entries}: the page's members in order, and one entry per
--          member.
--   lookup KEYS: the documents to read, then one index per scan (standalone only).
--          ARGV[2..]: {'lookup', documents, prefix, then per scan: min, limit}.
--          Reply: {entries of the documents, then {members, entries} per scan}.
--
-- An entry is one of:
--   {0}                      absent
--   {1, {field_1, value_1, ...}}
--                            a Redis hash: its fields (`v`, `p:` and `w:` ones for an
--                            autoshard document, see `commit.lua`; the caller checks
--                            them), followed by the `w:` fields of its record hash when
--                            ARGV[1] is `1`, and without any `w:` field when it is `0`
--   {2, reason}              a value that is not ours
--   {3}                      not read here (another hash tag; the caller reads it)

local records = ARGV[1] == '1'

local byte = string.byte
local W, COLON = byte('w'), byte(':')

-- On a cluster a script reaches a key it was not given (a listed document, a record
-- hash) only while its node holds it: one that moved away with a migrating slot answers
-- an error, not an empty value. That is no value of ours to judge: the script fails with
-- `TRYAGAIN`, which the client sends again (redis-rs retries it) until the slot has moved.
local function moving(reply, key)
  if string.find(reply.err, 'non local key', 1, true) then
    error({ err = 'TRYAGAIN `' .. key .. '` is moving with its slot' })
  end
end

local function entry(key)
  -- One call: a missing key reads as an empty hash, a value of another type as an error.
  local fields = redis.pcall('HGETALL', key)
  if fields.err then
    moving(fields, key)
    return { 2, 'a Redis ' .. redis.call('TYPE', key)['ok'] .. ' value, not an autoshard document' }
  elseif #fields == 0 then
    return { 0 }
  elseif records then
    local record = key .. '/~w'
    local entries = redis.pcall('HGETALL', record)
    if entries.err then
      moving(entries, record)
      return { 2, 'a write record that is not a Redis hash' }
    end
    for i = 1, #entries do
      fields[#fields + 1] = entries[i]
    end
    return { 1, fields }
  end
  local out, n = {}, 0
  for i = 1, #fields, 2 do
    local a, b = byte(fields[i], 1, 2)
    if a ~= W or b ~= COLON then
      out[n + 1], out[n + 2] = fields[i], fields[i + 1]
      n = n + 2
    end
  end
  return { 1, out }
end

local function page(index, prefix, min, limit, all)
  local members = redis.call('ZRANGEBYLEX', index, min, '+', 'LIMIT', 0, limit)
  local tag = string.match(index, '{([^}]*)}')
  local entries = {}
  for i, member in ipairs(members) do
    if all or string.match(member, '^{([^}]*)}') == tag then
      entries[i] = entry(prefix .. member)
    else
      entries[i] = { 3 }
    end
  end
  return { members, entries }
end

if ARGV[2] == 'scan' then
  return page(KEYS[1], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1')
end

if ARGV[2] == 'lookup' then
  local documents, prefix = tonumber(ARGV[3]), ARGV[4]
  local docs = {}
  for i = 1, documents do
    docs[i] = entry(KEYS[i])
  end
  local out = { docs }
  for s = 1, #KEYS - documents do
    local at = 5 + 2 * (s - 1)
    out[#out + 1] = page(KEYS[documents + s], prefix, ARGV[at], tonumber(ARGV[at + 1]), true)
  end
  return out
end

local out = {}
for i, key in ipairs(KEYS) do
  out[i] = entry(key)
end
return out
