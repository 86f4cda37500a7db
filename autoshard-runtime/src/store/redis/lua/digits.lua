-- autoshard: integers as decimal digits, put before `owner.lua` and the scripts that
-- write (`commit.lua`, `own.lua`, `merge.lua`; `mod.rs`). Lua numbers are doubles, exact
-- below 2^53, while the store contract's integers take the whole of u64 (write ids'
-- sequence numbers, record times, lease ends): where one may be larger, the scripts keep
-- its digits and compare those.

-- The digits `d` without leading zeros.
local function canonical(d)
  local s = string.gsub(d, '^0+', '')
  return s == '' and '0' or s
end

-- Whether the digits `a` hold at least as much as the digits `b` (both without leading
-- zeros), byte by byte: a Lua string comparison would follow the server's collation
-- locale.
local function at_least(a, b)
  if #a ~= #b then
    return #a > #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return true
end

-- Whether the digits `d` are an integer within u64.
local function u64(d)
  return at_least('18446744073709551615', canonical(d))
end

-- Versions count on Lua numbers: a document's version, or an entity group's version
-- counter, is counted past only while the next version stays at or below 2^53 - 1
-- (`MAX_VERSION` in `decode.rs`, the largest version a read takes). A larger one, which
-- no store of ours writes, is refused as malformed before anything is written: a write
-- would store a rounded version (one that came before) or one in exponent notation.

-- Whether the digits `v` (a version or a counter) leave room for the next version. A
-- text of 16 digits is compared as a Lua number: at or above 2^53 - 1 it rounds to a
-- number no smaller, and below it is exact.
local function countable(v)
  return #v < 16 or (#v == 16 and tonumber(v) < 9007199254740991)
end

-- Why a version or counter that is not `countable` is refused.
local UNCOUNTABLE = 'a version of 2^53 - 1 or more, past which the store cannot count exactly'
