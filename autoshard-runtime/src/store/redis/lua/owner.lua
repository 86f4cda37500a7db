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
  if group and #until_text <= 15 and (#until_text == 1 or string.byte(until_text) ~= 48) then
    return { group, tonumber(until_text), txn }
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
  return { group, until_ms, txn }
end

-- The live owner of a document whose `p:~own` field holds `text` (see
-- `store/ownership.rs`): its group id and lease end (a number: `lease_text` writes it for
-- a reply, which only a refusal needs), or nil when the field is absent, names no owner,
-- or its lease has passed and no transaction holds it.
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
  return group, until_ms
end

-- The decimal text of a lease end `live_owner` answered.
local function lease_text(until_ms)
  return string.format('%.0f', until_ms)
end
