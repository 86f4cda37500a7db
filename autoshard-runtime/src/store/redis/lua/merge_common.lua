-- autoshard: the common case of a merge (`merge.lua`) at the cost of the commands it
-- needs: an integer sum, max or min of at most 14 digits, a guard that holds, no owner,
-- a document that already holds the property, a writer that has not written this
-- change. Four calls: the document's version, value, owner and guard; the writer's record
-- entry; the new version and value; the new entry. Anything else (and the merges that
-- prune the record) is answered 'slow', having written nothing, and `merge.lua` decides
-- it.
--
-- KEYS: {document, its record hash}
-- ARGV: `p:` field of the property, fold ('sum' | 'max' | 'min'), operand, the smallest
--       and the largest value of the property's type (decimal), `w:` field of the writer,
--       seq, the record entry to store (`[seq,at_ms]`), `p:` field of the guard property
--       ('' for none), the JSON text the guard property must hold ('': must be absent).
--
-- A version is the document's own counter: one more than the version it had. Every
-- version a document gets is larger than every version it had before, also across a
-- delete and an insert (`commit.lua` raises the group's counter past the version of a
-- document it replaces or deletes), so no version comes back (the store contract).
--
-- Numbers: a stored value or operand is taken only when it is a canonical decimal integer
-- of at most 14 characters (sign included), and a result only when it stays below 10^14
-- in magnitude, where Lua numbers are exact; the new value and version go to `HSET` as
-- Lua numbers, which Redis writes as their integer text (exact below 2^53). '05', '1e3',
-- '-0', ' 5', 'nan' and anything longer go to `merge.lua`, which answers them as the
-- reference does. The checks are string patterns: on a pinned server each costs about
-- half a microsecond, and every other way of telling a canonical integer (`tostring`,
-- `string.format`) costs as much or more.
--
-- Reply: 'applied' | 'slow'

local key, property, fold, guard, want = KEYS[1], ARGV[1], ARGV[2], ARGV[9], ARGV[10]
local fields = redis.pcall('HMGET', key, 'v', property, 'p:~own', ARGV[6], guard ~= '' and guard or 'v')
if fields.err or fields[3] or fields[4] then
  return 'slow'
end
if guard ~= '' and fields[5] ~= (want ~= '' and want) then
  return 'slow'
end
local version, stored = fields[1], fields[2]
if not version or not stored or #version > 14 or not string.find(version, '^%d+$') then
  return 'slow'
end

local function exact(text)
  if #text < 15 and (string.find(text, '^-?[1-9]%d*$') or text == '0') then
    return tonumber(text)
  end
end
local a, b = exact(stored), exact(ARGV[3])
if not a or not b then
  return 'slow'
end
local lo, hi = tonumber(ARGV[4]), tonumber(ARGV[5])
if a < lo or a > hi or (fold ~= 'sum' and (b < lo or b > hi)) then
  return 'slow'
end

local entry = redis.call('HGET', KEYS[2], ARGV[6])
local mine = entry and tonumber(string.match(entry, '^%[(%d+),'))
if not entry or (mine and mine < tonumber(ARGV[7])) then
  local n
  if fold == 'sum' then
    n = a + b
  elseif fold == 'max' then
    n = a > b and a or b
  else
    n = a < b and a or b
  end
  if n > -1e14 and n < 1e14 and n >= lo and n <= hi then
    redis.call('HSET', key, 'v', version + 1, property, n)
    redis.call('HSET', KEYS[2], ARGV[6], ARGV[8])
    return 'applied'
  end
end
return 'slow'
