-- autoshard: the commit of one document's owner alone, expecting its version (what a key
-- group writes to join, renew and hand back a document in a slot of its own, one commit
-- per document on a Redis Cluster), at the cost of the commands it needs. It answers what
-- `commit.lua` answers for the same transaction (one check, one write of op 'o'), or
-- 'slow', having written nothing, when the document does not hold the version expected
-- (absent, changed, not ours): `commit.lua` then decides it. `commit.lua`'s generic
-- reading of its arguments and its setup cost a pinned server more than the commands
-- this takes (7-10 us a call against 5, `docs/design/redis.md`).
--
-- KEYS: {document}
-- ARGV: the version expected (decimal); the owner's text (`p:~own`, '' to take the owner
--       out); the owner token ('=' followed by the key group the transaction commits
--       for, '' for none), as `commit.lua` takes it.
--
-- Reply: {'ok', version, 1} | 'slow'
--        | {'grouped', 1, group, until_ms} | {'lost', 1, group}

local key, want, owner, token = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local got = redis.pcall('HMGET', key, 'v', 'p:~own')
if got.err or got[1] ~= want then
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
