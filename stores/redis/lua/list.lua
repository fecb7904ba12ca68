-- list: ARGV prefix, after, limit. Answers {entries}, each {key, view} for a
-- held key that starts with prefix and sorts after after, in byte order,
-- at most limit (0: all).
local prefix, after, limit = ARGV[2], ARGV[3], tonumber(ARGV[4])
local min = '[' .. prefix
if after ~= '' and after >= prefix then min = '(' .. after end
local out = {}
while true do
  -- Settling a key may drop it from the index: page by name, not offset.
  local batch = redis.call('ZRANGEBYLEX', P .. 'idx', min, '+', 'LIMIT', 0, 256)
  if #batch == 0 then break end
  min = '(' .. batch[#batch]
  for _, key in ipairs(batch) do
    if string.sub(key, 1, #prefix) ~= prefix then
      commit()
  return {out}
    end
    local st = settle(key)
    if #st.holds == 0 and #st.q == 0 then redis.call('ZREM', P .. 'idx', key) end -- expired by Redis
    local v = view(st)
    if v[1] == 1 then
      table.insert(out, {key, v})
      if limit > 0 and #out >= limit then
        commit()
  return {out}
      end
    end
  end
end
commit()
  return {out}
