-- acquire_all: ARGV owner, ttl, wait, metadata, alive, then the keys (in
-- byte order). Answers as acquire, and with 'H' and 'K' the 1-based place
-- of the key the answer is about: {'H', token, remaining, reserved, place},
-- {'K', kind, limit, place}.
local owner, ttl, wait, meta, alive = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local keys = {}
for i = 7, #ARGV do
  keys[#keys + 1] = ARGV[i]
  forget(releaseName(ARGV[i], owner)) -- whatever the answer: the owner may hold the key again
end
local sts = {}
for i, k in ipairs(keys) do sts[i] = get(k) end
pump()

-- heldAt answers about the first key that is not free.
local function heldAt()
  for i, st in ipairs(sts) do
    if #st.holds > 0 or #st.q > 0 then
      local h = held(st)
      return {'H', h[2], h[3], h[4], i}
    end
  end
  return {'H', 0, 0, 0, 1}
end

local function sameSet(rec)
  if not rec or #rec.keys ~= #keys then return false end
  for i, k in ipairs(keys) do
    if rec.keys[i] ~= k then return false end
  end
  return true
end

for i, st in ipairs(sts) do
  if (#st.holds > 0 or #st.q > 0) and st.kind ~= 0 then
    commit()
    return {'K', st.kind, st.limit, i}
  end
end

local rec = setRecord(owner)
for i, st in ipairs(sts) do
  local j = liveHold(st, owner)
  if j then
    local h = st.holds[j]
    commit()
    -- The same set again: the same grant, not lengthened. Another set, or
    -- a single key, of this owner: held.
    if h.set == 1 and sameSet(rec) then return {'G', h.t, h.x - now, h.x - now} end
    return heldAt()
  end
end

local queued = find(sts[1].q, owner)
if queued and sts[1].q[queued].set == 1 and sameSet(rec) then
  -- Already queued on every key: it keeps its places, and proves it is alive.
  if wait <= 0 then
    endSet(owner, keys[1])
    commit()
    return heldAt()
  end
  local due = -1
  for _, st in ipairs(sts) do
    local p = find(st.q, owner)
    if p then st.q[p].a = now + alive; st.dirty = true end
    local d = nextDeadline(st)
    if d >= 0 and (due < 0 or d < due) then due = d end
  end
  commit()
  return {'Q', due, lastWake(owner)}
end
for _, st in ipairs(sts) do
  if find(st.q, owner) then
    commit()
    return heldAt() -- queued for something else
  end
end

local free = true
for _, st in ipairs(sts) do
  if #st.holds > 0 or #st.q > 0 then free = false end
end
if free then
  local t = nextToken()
  for _, st in ipairs(sts) do
    st.kind, st.limit = 0, 0
    table.insert(st.holds, {o = owner, t = t, x = now + ttl, m = meta, s = 0, ttl = ttl, ss = '', set = 1})
    st.changed = true
  end
  putSet(owner, keys, now + ttl)
  commit()
  return {'G', t, ttl, ttl}
end
if wait <= 0 then
  commit()
  return heldAt()
end
for _, st in ipairs(sts) do
  if #st.q >= MAX_WAITERS then
    commit()
    return {'F', #st.q}
  end
end
putSet(owner, keys, now + wait)
local due = -1
for i, st in ipairs(sts) do
  if #st.holds == 0 and #st.q == 0 then st.kind, st.limit = 0, 0 end
  table.insert(st.q, {o = owner, ttl = ttl, w = now + wait, a = now + alive, m = meta, s = 0, ss = '', set = 1})
  st.changed = true
  touch(keys[i])
  local d = nextDeadline(st)
  if d >= 0 and (due < 0 or d < due) then due = d end
end
commit()
return {'Q', due, lastWake(owner)}
