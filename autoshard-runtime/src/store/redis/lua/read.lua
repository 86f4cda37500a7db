-- autoshard: read documents (server side, so a foreign value is reported, not an error).
--
-- KEYS: the documents to read. Reply: one entry per key, in order:
--   {0}                      absent
--   {1, version, json}       an autoshard document
--   {2, reason}              a value that is not ours

local out = {}
for i, key in ipairs(KEYS) do
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then
    out[i] = { 0 }
  elseif t ~= 'hash' then
    out[i] = { 2, 'a Redis ' .. t .. ' value, not an autoshard document' }
  else
    local f = redis.call('HMGET', key, 'v', 'd')
    if f[1] and f[2] and string.match(f[1], '^%d+$') then
      out[i] = { 1, f[1], f[2] }
    else
      out[i] = { 2, 'a Redis hash without the autoshard fields `v` and `d`' }
    end
  end
end
return out
