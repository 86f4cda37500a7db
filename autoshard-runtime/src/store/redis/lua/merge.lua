-- autoshard: fold an operand into one property of one document with a built-in fold,
-- at most once per write id (the store contract's merge, `store/merge/mod.rs`), in one
-- atomic step. The document layout is the one in `commit.lua`.
--
-- KEYS: {document, version counter of its entity group (written by nothing but the
--       `INCRBY 0` of an 'already', see below)}
-- ARGV: property, fold ('sum' | 'max' | 'min' | 'union-strings' | 'union-integers'),
--       operand JSON, the smallest and the largest value of the property's type (of the
--       set's elements for 'union-integers'; decimal), writer, seq, at_ms, horizon_ms,
--       guard property ('' for none), guard mode ('-' must be absent | '=' must hold),
--       guard value JSON.
--
-- A stored value or operand that is not of the property's type (an integer outside its
-- range, a set of other elements, anything else) is answered 'unsupported', as the
-- reference does: nothing is folded into a value the entity could not read.
--
-- Numbers are never Lua numbers where exactness matters: integers stay decimal text
-- (sums, comparisons and bounds on digit strings), and union elements stay the JSON
-- text serde_json wrote (equal values, equal texts). The write record's sequence numbers
-- and times, which take the whole of u64, are compared as digits too: as Lua numbers, two
-- neighbours beyond 2^53 would be one, and a write taken for one already applied.
--
-- The record entry of the merge's writer is one field `w:<writer>` = `[seq,at_ms]` of the
-- document's record hash (its key followed by `/~w`, same slot; see `commit.lua`): the
-- merge reads that one entry (and the writer's field of the document itself, where an
-- earlier layout kept it) and writes it back; the entries of other writers older than the
-- horizon are dropped on one merge in 256 (by sequence number: `store::merge::PRUNE_EVERY`),
-- so a merge costs about the same however many writers a document records.
--
-- A merge gives the document the version after its own: versions count up per document
-- (`commit.lua` keeps them from coming back after a delete). The common case of a merge
-- runs as `merge_common.lua`, which does the same in fewer steps; this script answers
-- everything, the common case included.
--
-- A sum or comparison of integers of at most 15 characters (below 2^53 in magnitude)
-- runs on Lua numbers, which are exact there; anything longer goes through the decimal
-- text arithmetic below.
--
-- A document a live key group owns takes no merge (`store/ownership.rs`, by the server's
-- clock; `live_owner`, in `owner.lua`, which `mod.rs` puts before this script): the
-- answer is {'grouped', group, until_ms}.
--
-- Reply: {'applied'} | {'already'} | {'missing'} | {'unsupported'} | {'overflow'}
--        | {'malformed', reason}

local key, counter = KEYS[1], KEYS[2]
local record = key .. '/~w'
local property, fold, operand = ARGV[1], ARGV[2], ARGV[3]
local type_min, type_max = ARGV[4], ARGV[5]
local writer, seq, horizon = ARGV[6], ARGV[7], ARGV[9]
local guard, guard_mode, guard_value = ARGV[10], ARGV[11], ARGV[12]

-- One read: the version, the guard property, this writer's record entry, the value.
local fields = redis.pcall('HMGET', key, 'v', 'p:' .. (guard ~= '' and guard or property),
  'w:' .. writer, 'p:' .. property, 'p:~own')
if fields.err then
  return { 'malformed', 'not an autoshard document' }
end
local version, guarded, entry, stored = fields[1], fields[2], fields[3], fields[4]
if not version then
  if redis.call('EXISTS', key) == 1 then
    return { 'malformed', 'a Redis hash that is not an autoshard document' }
  end
  return { 'missing' }
end
if not string.match(version, '^%d+$') then
  return { 'malformed', 'not an autoshard document' }
end
if not countable(version) then
  return { 'malformed', UNCOUNTABLE }
end
local owner, owned_until = live_owner(fields[5])
if owner then
  return { 'grouped', owner, lease_text(owned_until) }
end

if guard ~= '' then
  if (guard_mode == '-' and guarded) or (guard_mode == '=' and guarded ~= guard_value) then
    return { 'missing' }
  end
end

-- The sequence number this writer's entry of the write record records, as digits: only
-- an entry whose first two elements are integers within u64 records one (`RECORD` in
-- `store/merge/mod.rs`).
local function seq_of(text)
  local s, at = string.match(text or '', '^%[%s*(%d+)%s*,%s*(%d+)%s*[,%]]')
  return s and u64(s) and u64(at) and canonical(s) or nil
end
local recorded = redis.pcall('HGET', record, 'w:' .. writer)
if type(recorded) == 'table' then
  -- The record hash is reached without being given: on a cluster it answers an error
  -- once it has moved away with a migrating slot. Nothing is written yet; the client
  -- sends `TRYAGAIN` again once the slot has moved.
  if string.find(recorded.err or '', 'non local key', 1, true) then
    error({ err = 'TRYAGAIN `' .. record .. '` is moving with its slot' })
  end
  return { 'malformed', 'a write record that is not a Redis hash' }
end
local mine = seq_of(recorded) or seq_of(entry)
if mine and at_least(mine, seq) then
  -- A write that changes nothing, so that the `WAIT` a store with replicas sends after
  -- this script covers the write this answer stands for (`durability.rs`).
  redis.call('INCRBY', counter, 0)
  return { 'already' }
end

-- The decimal text one larger than the digits `digits`.
local function successor(digits)
  local i = #digits
  while i > 0 and string.byte(digits, i) == 57 do
    i = i - 1
  end
  local head = i > 0 and string.sub(digits, 1, i - 1) .. string.char(string.byte(digits, i) + 1) or '1'
  return head .. string.rep('0', #digits - i)
end

-- Writes the folded value with the next version and this writer's record entry.
local function write(folded)
  redis.call('HSET', key, 'v', successor(version), 'p:' .. property, folded)
  redis.call('HSET', record, 'w:' .. writer, '[' .. ARGV[7] .. ',' .. ARGV[8] .. ']')
  -- 10^8 is a multiple of 256: the last eight digits tell the remainder.
  if tonumber(string.sub(seq, -8)) % 256 == 0 then
    local entries = redis.call('HGETALL', record)
    for i = 1, #entries, 2 do
      local at = string.match(entries[i + 1], ',(%d+)%]$')
      if at and not at_least(canonical(at), horizon) then
        redis.call('HDEL', record, entries[i])
      end
    end
  end
  return { 'applied' }
end

-- Integers short enough to be exact as Lua numbers.
local function small(x)
  return x and #x < 16 and (string.match(x, '^-?[1-9]%d*$') or x == '0') and tonumber(x)
end
if stored and (fold == 'sum' or fold == 'max' or fold == 'min') then
  local a, b = small(stored), small(operand)
  if a and b then
    local lo, hi = tonumber(type_min), tonumber(type_max)
    if a < lo or a > hi or (fold ~= 'sum' and (b < lo or b > hi)) then
      return { 'unsupported' }
    end
    local n
    if fold == 'sum' then
      n = a + b
      if n < lo or n > hi then
        return { 'overflow' }
      end
    elseif fold == 'max' then
      n = math.max(a, b)
    else
      n = math.min(a, b)
    end
    return write(string.format('%.0f', n))
  end
end

-- Signed decimal integers as text.
local function split(x)
  if string.sub(x, 1, 1) == '-' then
    return -1, string.sub(x, 2)
  end
  return 1, x
end

local function cmp_digits(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  if a == b then
    return 0
  end
  return a < b and -1 or 1
end

local function add_digits(a, b)
  local out, carry = {}, 0
  local i, j = #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry + (i > 0 and string.byte(a, i) - 48 or 0) + (j > 0 and string.byte(b, j) - 48 or 0)
    out[#out + 1] = string.char(48 + d % 10)
    carry = math.floor(d / 10)
    i, j = i - 1, j - 1
  end
  return string.reverse(table.concat(out))
end

-- a - b for digit strings with a >= b.
local function sub_digits(a, b)
  local out, borrow = {}, 0
  local i, j = #a, #b
  while i > 0 do
    local d = string.byte(a, i) - 48 - borrow - (j > 0 and string.byte(b, j) - 48 or 0)
    if d < 0 then
      d, borrow = d + 10, 1
    else
      borrow = 0
    end
    out[#out + 1] = string.char(48 + d)
    i, j = i - 1, j - 1
  end
  local s = string.gsub(string.reverse(table.concat(out)), '^0+', '')
  return s == '' and '0' or s
end

local function signed(sign, digits)
  if digits == '0' or sign > 0 then
    return digits
  end
  return '-' .. digits
end

local function add(x, y)
  local sx, dx = split(x)
  local sy, dy = split(y)
  if sx == sy then
    return signed(sx, add_digits(dx, dy))
  end
  local c = cmp_digits(dx, dy)
  if c == 0 then
    return '0'
  elseif c > 0 then
    return signed(sx, sub_digits(dx, dy))
  end
  return signed(sy, sub_digits(dy, dx))
end

local function cmp(x, y)
  local sx, dx = split(x)
  local sy, dy = split(y)
  if dx == '0' then
    sx = 1
  end
  if dy == '0' then
    sy = 1
  end
  if sx ~= sy then
    return sx < sy and -1 or 1
  end
  local c = cmp_digits(dx, dy)
  return sx > 0 and c or -c
end

local function integer(x)
  return x and (string.match(x, '^-?[1-9]%d*$') or x == '0')
end

-- Whether `x` is an integer within the property type's range.
local function in_range(x)
  return integer(x) and cmp(x, type_min) >= 0 and cmp(x, type_max) <= 0
end

-- The elements of a JSON array of strings (`strings`) or of integers within the type's
-- range, as their JSON text; nil for anything else.
local function elements(text, strings)
  if not text or string.sub(text, 1, 1) ~= '[' then
    return nil
  end
  local out, i, n = {}, 2, #text
  if string.sub(text, i, i) == ']' then
    return i == n and out or nil
  end
  while true do
    local token
    if string.sub(text, i, i) == '"' then
      if not strings then
        return nil
      end
      local j = i + 1
      while true do
        local c = string.sub(text, j, j)
        if c == '\\' then
          j = j + 2
        elseif c == '"' then
          break
        elseif c == '' then
          return nil
        else
          j = j + 1
        end
      end
      token = string.sub(text, i, j)
      i = j + 1
    else
      local s, e = string.find(text, '^-?%d+', i)
      if strings or not s then
        return nil
      end
      token = string.sub(text, s, e)
      if not in_range(token) then
        return nil
      end
      i = e + 1
    end
    out[#out + 1] = token
    local c = string.sub(text, i, i)
    if c == ']' then
      return i == n and out or nil
    elseif c ~= ',' then
      return nil
    end
    i = i + 1
  end
end

if not stored then
  -- A hash holding none of the property may be a foreign one with a `v` field.
  for _, name in ipairs(redis.call('HKEYS', key)) do
    local prefix = string.sub(name, 1, 2)
    if name ~= 'v' and prefix ~= 'p:' and prefix ~= 'w:' then
      return { 'malformed', 'a Redis hash that is not an autoshard document' }
    end
  end
end
local folded
if fold == 'union-strings' or fold == 'union-integers' then
  local strings = fold == 'union-strings'
  local mine_items = elements(operand, strings)
  local have = stored and elements(stored, strings) or (not stored and {})
  if not mine_items or not have then
    return { 'unsupported' }
  end
  local seen = {}
  for _, item in ipairs(have) do
    seen[item] = true
  end
  for _, item in ipairs(mine_items) do
    if not seen[item] then
      seen[item] = true
      have[#have + 1] = item
    end
  end
  folded = '[' .. table.concat(have, ',') .. ']'
else
  -- The change a sum adds may be any integer (a decrement of an unsigned counter).
  local operand_ok = (fold == 'sum' and integer(operand)) or (fold ~= 'sum' and in_range(operand))
  if not operand_ok or (stored and not in_range(stored)) then
    return { 'unsupported' }
  end
  if not stored then
    folded = operand
  elseif fold == 'sum' then
    folded = add(stored, operand)
  elseif fold == 'max' then
    folded = cmp(stored, operand) >= 0 and stored or operand
  else
    folded = cmp(stored, operand) <= 0 and stored or operand
  end
  if fold == 'sum' and (cmp(folded, type_min) < 0 or cmp(folded, type_max) > 0) then
    return { 'overflow' }
  end
end

return write(folded)
