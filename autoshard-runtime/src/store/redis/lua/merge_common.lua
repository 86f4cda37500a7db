-- autoshard: the common case of a merge (`merge.lua`) at the cost of the commands it
-- needs: an integer sum, max or min of at most 14 digits, a guard that holds, no owner,
-- a document that already holds the property, a write newer than its writer's record
-- entry. Four calls: the document's version, value, owner and guard; the writer's record
-- entry (and, on the writer's first merge into the document, whether the document holds
-- an entry of its own for the writer, and how many entries the record holds); the new
-- version and value; the new entry.
-- Anything else (and the merges that prune the record) is answered 'slow', having
-- written nothing, and `merge.lua` decides it.
--
-- KEYS: {document, its record hash}
-- ARGV: `p:` field of the property; the operand; `w:` field of the writer; seq; the
--       record entry to store (`[seq,at_ms]`); fold ('sum' | 'max' | 'min'); `p:` field
--       of the guard property ('' for none); the JSON text the guard property must hold
--       ('': must be absent); and only for a type narrower than i64, the smallest and the
--       largest value of the type (decimal).
-- The client sends the operand here only as the decimal text of an integer below 10^14
-- in magnitude, within the type for max and min (`merge.rs`); every other merge goes to
-- `merge.lua` directly. Each argument costs the server time on every call (about an
-- eighth of a microsecond on a pinned server), so the common case has no more than it
-- needs.
--
-- The writer's entry: a document written by an earlier layout may hold entries in its
-- own hash (`commit.lua`). An entry in the record hash is the writer's last write
-- whenever it is there: a merge that writes one writes a sequence number above the
-- writer's entry in the document (this script and `merge.lua` read the document's entry
-- when the record hash has none), and a put rewrites both (the record it carries, read
-- from both, goes to the record hash). So this script looks at the document's field
-- (`HEXISTS`) only on a writer's first merge into the document, not on every call (each
-- field an `HMGET` reads costs about as much as an argument). An entry this script does
-- not read as `[<digits without a leading zero>,...` goes to `merge.lua`. Sequence
-- numbers are compared by their number of digits first (the client sends its own without
-- a leading zero), and as numbers only when that is equal: a Lua string comparison would
-- follow the server's collation locale. Beyond 2^53 two neighbours are one Lua number;
-- the entry then does not read as older, and `merge.lua`, which compares the digits,
-- decides.
--
-- The record hash of a hot document holds an entry for every writer that merged into it
-- lately (64 with 64 clients of their own). Redis keeps a small hash as a listpack, whose
-- every `HGET` and `HSET` scans its entries: on a pinned server 0.35 us for the middle
-- field of 64 and 0.59 us for the last, against 0.09 us in a hash table, twice per
-- merge. So when a writer's first merge into the document finds 32 entries or more in a
-- listpack, the script adds and removes a field of 1,025 bytes, longer than a listpack
-- value may be (`hash-max-listpack-value`: 64 bytes by default; a server configured past
-- 1 KB keeps the listpack): Redis turns the hash into a table for good (until a restart
-- loads it again), and what it holds does not change. `OBJECT ENCODING` is asked with
-- `pcall`, so a server without it skips this.
--
-- A version is the document's own counter: one more than the version it had. Every
-- version a document gets is larger than every version it had before, also across a
-- delete and an insert (`commit.lua` raises the group's counter past the version of a
-- document it replaces or deletes), so no version comes back (the store contract).
--
-- Numbers: a stored value is taken only when it is a canonical decimal integer of at most
-- 14 characters (sign included), and a result only when it stays below 10^14 in
-- magnitude, where Lua numbers are exact; the new value and version go to `HSET` as the
-- text `string.format('%d', ...)` writes (Redis would format a Lua number with `%.17g`,
-- which costs more for the same text). '05', '1e3', '-0', ' 5', 'nan' and anything
-- longer go to `merge.lua`, which answers them as the reference does. The checks are
-- string patterns: on a pinned server each costs about a third of a microsecond, and
-- every other way of telling a canonical integer (`tostring`, `string.format`) costs as
-- much or more.
--
-- Reply: 'applied' | 'slow'

local key, property, fold, guard = KEYS[1], ARGV[1], ARGV[6], ARGV[7]
local fields = redis.pcall('HMGET', key, 'v', property, 'p:~own', guard ~= '' and guard or 'v')
if fields.err or fields[3] then
  return 'slow'
end
if guard ~= '' and fields[4] ~= (ARGV[8] ~= '' and ARGV[8]) then
  return 'slow'
end
local version, stored = fields[1], fields[2]
if not version or not stored or #version > 14 or #stored > 14 or not string.find(version, '^%d+$')
  or not (string.find(stored, '^-?[1-9]%d*$') or stored == '0') then
  return 'slow'
end
local a, b = stored + 0, ARGV[2] + 0
local lo, hi = ARGV[9], ARGV[10]
if lo and (a < lo + 0 or a > hi + 0) then
  return 'slow'
end

local record, writer = KEYS[2], ARGV[3]
local entry = redis.pcall('HGET', record, writer)
if type(entry) == 'table' then
  -- Not a hash: `merge.lua` reports it.
  return 'slow'
elseif entry then
  local mine, seq = string.match(entry, '^%[([1-9]%d*),'), ARGV[4]
  if not mine or #mine > #seq or (#mine == #seq and mine + 0 >= seq + 0) then
    return 'slow'
  end
elseif redis.call('HEXISTS', key, writer) == 1 then
  return 'slow'
end
local n
if fold == 'sum' then
  n = a + b
elseif fold == 'max' then
  n = a > b and a or b
else
  n = a < b and a or b
end
if n > -1e14 and n < 1e14 and (not lo or (n >= lo + 0 and n <= hi + 0)) then
  if not entry and redis.call('HLEN', record) >= 32 then
    -- A writer joins a record of many: a hash table from now on (see above). Before the
    -- merge's own writes, so that a failure here leaves nothing half written.
    local encoding = redis.pcall('OBJECT', 'ENCODING', record)
    if encoding == 'listpack' or encoding == 'ziplist' then
      local long = string.rep('~', 1025)
      redis.call('HSET', record, long, '')
      redis.call('HDEL', record, long)
    end
  end
  local format = string.format
  redis.call('HSET', key, 'v', format('%d', version + 1), property, format('%d', n))
  redis.call('HSET', record, writer, ARGV[5])
  return 'applied'
end
return 'slow'
