-- autoshard: the ownership rule of `store/ownership.rs`, put before `commit.lua` and
-- `merge.lua` (`mod.rs`): both scripts check a document's owner the same way.

-- The store's clock in milliseconds (TIME), read once per call and only when needed.
local clock
local function now_ms()
  if not clock then
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return clock
end

-- The owners parsed in this call, by the text of their field (a key group's documents
-- all hold the same text, so a commit over hundreds of them decodes it once): each the
-- table {group, until_ms, txn}, or false for a text that names no owner.
local parsed_owners = {}

-- The owner the text of a `p:~own` field names (see `store/ownership.rs`), or false when
-- it is not of the form `{"group": <string>, "until": <integer>}` (with an optional
-- `"txn": <string>`).
local function parse_owner(text)
  -- The texts the store writes (`Owner::to_value`: compact, keys sorted, or in the order
  -- written where serde_json keeps it), read without a JSON decode, which costs about a
  -- microsecond more per call: ids of ASCII letters, digits, `_` and `-` (no escapes), a
  -- lease end of at most 15 digits without a leading zero (exact as a Lua number, and
  -- valid JSON). Any other text takes the decode below, which answers these texts alike.
  local group, until_text = string.match(text, '^{"group":"([0-9A-Za-z_%-]*)","until":(%d+)}$')
  local txn
  if not group then
    group, txn, until_text = string.match(text, '^{"group":"([0-9A-Za-z_%-]*)","txn":"([0-9A-Za-z_%-]*)","until":(%d+)}$')
  end
  if not group then
    group, until_text, txn = string.match(text, '^{"group":"([0-9A-Za-z_%-]*)","until":(%d+),"txn":"([0-9A-Za-z_%-]*)"}$')
  end
  if group and (#until_text == 1 or string.byte(until_text) ~= 48) then
    -- Beyond u64 a JSON reader takes the number for a float: no owner (`Owner::of`).
    return u64(until_text) and { group, tonumber(until_text), txn, until_text }
  end
  if not string.match(text, '"until"%s*:%s*%d+%s*[,}]') then
    return false
  end
  local ok, owner = pcall(cjson.decode, text)
  if not ok or type(owner) ~= 'table' then
    return false
  end
  local group, until_ms, txn = owner['group'], owner['until'], owner['txn']
  if type(group) ~= 'string' or type(until_ms) ~= 'number' or until_ms < 0
      or until_ms ~= math.floor(until_ms) or (txn ~= nil and type(txn) ~= 'string') then
    return false
  end
  -- The digits of the lease end, which the number holds exactly only below 2^53: those
  -- of the last `"until"` (the decode keeps the last of repeated keys, as serde_json
  -- does), when they are the number decoded.
  local digits
  for d in string.gmatch(text, '"until"%s*:%s*(%d+)%s*[,}]') do
    digits = d
  end
  if digits and tonumber(digits) == until_ms then
    if not u64(digits) then
      return false
    end
    digits = canonical(digits)
  else
    digits = nil
  end
  return { group, until_ms, txn, digits }
end

-- The live owner of a document whose `p:~own` field holds `text` (see
-- `store/ownership.rs`): its group id and the owner parsed (`lease_text` writes its lease
-- end for a reply, which only a refusal needs), or nil when the field is absent, names no
-- owner, or its lease has passed and no transaction holds it. A lease end compares with
-- the clock as a Lua number: beyond 2^53 it is rounded, but it is then far past any
-- clock either way.
local function live_owner(text)
  if type(text) ~= 'string' then
    return nil
  end
  local owner = parsed_owners[text]
  if owner == nil then
    owner = parse_owner(text)
    parsed_owners[text] = owner
  end
  if not owner then
    return nil
  end
  local group, until_ms, txn = owner[1], owner[2], owner[3]
  if txn == nil and until_ms <= now_ms() then
    return nil
  end
  return group, owner
end

-- The decimal text of the lease end of an owner `live_owner` answered: its digits as the
-- field holds them, where known.
local function lease_text(owner)
  return owner[4] or string.format('%.0f', owner[2])
end
