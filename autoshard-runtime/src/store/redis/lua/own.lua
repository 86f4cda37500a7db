-- autoshard: commits of documents' owners alone, each expecting its document's version
-- (what a key group writes to join, renew and hand back a document in a slot of its own,
-- one commit per document on a Redis Cluster), at the cost of the commands they need.
-- Each document's commit is decided on its own, as if it were sent alone: its answer is
-- what `commit.lua` answers for the same transaction (one check, one write of op 'o'), or
-- 'slow', having written nothing to that document, when the document does not hold the
-- version expected (absent, changed, not ours): `commit.lua` then decides it.
-- `commit.lua`'s generic reading of its arguments and its setup cost a pinned server more
-- than the commands this takes (7-10 us a call against 5, `docs/design/redis.md`).
--
-- Several documents: on a cluster the commits bound for one master go in one call
-- (`own_batch.rs`), whose first document is its only declared key; the others are named
-- in ARGV and may lie in other slots of the same master (Redis lets a script without
-- flags touch any key its node serves). A document the node does not serve (its slot
-- moved, or is migrating and the document is gone) makes its first command fail before
-- anything is written to it, and its answer is 'moved': it is sent on its own then, to
-- `commit.lua` through the client's routing.
--
-- A commit may also expect one other document of its document's slot absent (a key group
-- member's intent document, which a join expects as read): when it exists, the answer is
-- 'slow', having written nothing.
--
-- KEYS: {the first document}
-- ARGV: for the first document: the version expected (decimal); the owner's text
--       (`p:~own`, '' to take the owner out); the owner token ('=' followed by the key
--       group the transaction commits for, '' for none), as `commit.lua` takes it; the
--       name of the document expected absent ('' for none). Then, for each further
--       document: its name, and the same four.
--
-- Reply: one answer per document, in order, each
--        {'ok', version, 1} | 'slow' | 'moved' | {'grouped', 1, group, until_ms}
--        | {'lost', 1, group}

local function unreachable(err)
  return string.find(err, 'non local key', 1, true) and 'moved' or 'slow'
end

local function own(key, want, owner, token, absent)
  if absent ~= '' then
    local there = redis.pcall('EXISTS', absent)
    if type(there) == 'table' then
      return unreachable(there.err)
    end
    if there ~= 0 then
      return 'slow'
    end
  end
  local got = redis.pcall('HMGET', key, 'v', 'p:~own')
  if got.err then
    return unreachable(got.err)
  end
  if got[1] ~= want or not countable(want) then
    return 'slow'
  end
  local tokened = token ~= ''
  token = string.sub(token, 2)
  local group, until_ms = live_owner(got[2])
  if group and (not tokened or group ~= token) then
    return { 'grouped', 1, group, lease_text(until_ms) }
  end
  if tokened and not group then
    return { 'lost', 1, token }
  end
  local version = want + 1
  if owner ~= '' then
    redis.call('HSET', key, 'v', string.format('%d', version), 'p:~own', owner)
  else
    redis.call('HSET', key, 'v', string.format('%d', version))
    redis.call('HDEL', key, 'p:~own')
  end
  return { 'ok', version, 1 }
end

local answers = { own(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4]) }
for i = 5, #ARGV, 5 do
  answers[#answers + 1] = own(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4])
end
return answers
