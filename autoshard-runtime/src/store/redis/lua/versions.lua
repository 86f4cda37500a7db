-- autoshard: the versions the writing scripts count past, put before `commit.lua`,
-- `own.lua` and `merge.lua` (`mod.rs`). They count on Lua numbers, which are doubles
-- and exact below 2^53: a document's version, or an entity group's version counter, is
-- counted past only while the next version stays at or below 2^53 - 1 (`MAX_VERSION` in
-- `decode.rs`, the largest version a read takes). A larger one, which no store of ours
-- writes, is refused as malformed before anything is written: a write would store a
-- rounded version (one that came before) or one in exponent notation.

-- Whether the digits `v` (a version or a counter) leave room for the next version. A
-- text of 16 digits is compared as a Lua number: at or above 2^53 - 1 it rounds to a
-- number no smaller, and below it is exact.
local function countable(v)
  return #v < 16 or (#v == 16 and tonumber(v) < 9007199254740991)
end

-- Why a version or counter that is not `countable` is refused.
local UNCOUNTABLE = 'a version of 2^53 - 1 or more, past which the store cannot count exactly'
