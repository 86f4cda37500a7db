-- autoshard: read documents, or one scan page, in one atomic step (server side, so a
-- foreign value is reported, not an error).
--
-- Two call forms:
--   read   KEYS: the documents to read.  ARGV: none.
--          Reply: one entry per key, in order.
--   scan   KEYS: {index}, a sorted set of encoded document keys (scores 0).
--          ARGV: {'scan', prefix, min, limit, all}: the namespace prefix of document
--          names, the ZRANGEBYLEX start (`-` or `(cursor`), the page size, and `1` to
--          read every member's document here, or `0` to read only the members in the
--          index's own hash tag (on a cluster a script may touch no other slot).
--          Reply: {members, entries}: the page's members in order, and one entry per
--          member.
--
-- An entry is one of:
--   {0}                      absent
--   {1, version, name_1, json_1, ..., name_n, json_n}
--                            an autoshard document: its version, then each property's
--                            name and JSON (the layout in `commit.lua`)
--   {2, reason}              a value that is not ours
--   {3}                      not read here (another hash tag; the caller reads it)

local function entry(key)
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then
    return { 0 }
  elseif t ~= 'hash' then
    return { 2, 'a Redis ' .. t .. ' value, not an autoshard document' }
  end
  local fields = redis.call('HGETALL', key)
  local out = { 1, false }
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name == 'v' and string.match(fields[i + 1], '^%d+$') then
      out[2] = fields[i + 1]
    elseif string.sub(name, 1, 2) == 'p:' then
      out[#out + 1] = string.sub(name, 3)
      out[#out + 1] = fields[i + 1]
    else
      out = nil
      break
    end
  end
  if out and out[2] then
    return out
  end
  return { 2, 'a Redis hash that is not an autoshard document (a version `v` and `p:` fields)' }
end

if ARGV[1] ~= 'scan' then
  local out = {}
  for i, key in ipairs(KEYS) do
    out[i] = entry(key)
  end
  return out
end

local prefix, all = ARGV[2], ARGV[5] == '1'
local members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[3], '+', 'LIMIT', 0, tonumber(ARGV[4]))
local tag = string.match(KEYS[1], '{([^}]*)}')
local entries = {}
for i, member in ipairs(members) do
  if all or string.match(member, '^{([^}]*)}') == tag then
    entries[i] = entry(prefix .. member)
  else
    entries[i] = { 3 }
  end
end
return { members, entries }
