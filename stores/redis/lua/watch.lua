-- watch: ARGV op ('key' or 'list'), key or prefix, after, limit, index.
-- Answers {changed, answer, index, due}: changed is 1 when a change to the
-- key (or under the prefix) has been made since index (or index is 0, or
-- the log no longer reaches back to it); answer is the key's view, or the
-- list's entries; due is how long until the earliest hold read ends (-1:
-- none), when a watcher must look again, since nobody else may touch the
-- key then. An index is the change index plus one, so that it is never 0.
local op, name, after, limit, index = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local due = -1
local function soonest(st)
  local d = nextDeadline(st)
  if d >= 0 and (due < 0 or d < due) then due = d end
end

local answer
if op == 'key' then
  local st = settle(name)
  soonest(st)
  answer = view(st)
else
  answer = {}
  local min = '[' .. name
  if after ~= '' and after >= name then min = '(' .. after end
  local done = false
  while not done do
    local batch = redis.call('ZRANGEBYLEX', P .. 'idx', min, '+', 'LIMIT', 0, 256)
    if #batch == 0 then break end
    min = '(' .. batch[#batch]
    for _, key in ipairs(batch) do
      if string.sub(key, 1, #name) ~= name then done = true; break end
      local st = settle(key)
      if #st.holds == 0 and #st.q == 0 then redis.call('ZREM', P .. 'idx', key) end -- expired by Redis
      soonest(st)
      local v = view(st)
      if v[1] == 1 and (limit == 0 or #answer < limit) then table.insert(answer, {key, v}) end
    end
  end
end

commit()
local ver = tonumber(redis.call('GET', P .. 'ver') or '0')
local changed = 0
local seen = index - 1
if index == 0 or seen ~= ver then
  if index == 0 or seen > ver then
    changed = 1 -- the first read, or an index this store never gave (its state was lost)
  else
    local log = redis.call('XRANGE', P .. 'log', '(' .. num(seen) .. '-1', '+', 'COUNT', 10000)
    if #log == 0 or log[1][1] ~= num(seen + 1) .. '-1' or #log == 10000 then
      changed = 1 -- the log no longer reaches back to index
    else
      for _, e in ipairs(log) do
        local k = e[2][2]
        if (op == 'key' and k == name) or (op ~= 'key' and string.sub(k, 1, #name) == name) then
          changed = 1
          break
        end
      end
    end
  end
end
return {changed, answer, ver + 1, due}
