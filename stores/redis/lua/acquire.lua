-- acquire: ARGV key, owner, ttl, wait, metadata, kind, limit, shared,
-- session, alive. Answers {'G', token, remaining, term} granted, {'Q',
-- block, last wake} queued, {'H', token, remaining, reserved} held, {'K',
-- kind, limit} of another kind, {'F', waiters} queue full, {'S'} no
-- session.
local key, owner = ARGV[2], ARGV[3]
local req = {o = owner, ttl = tonumber(ARGV[4]), m = ARGV[6], kind = tonumber(ARGV[7]),
  limit = tonumber(ARGV[8]), s = tonumber(ARGV[9]), ss = ARGV[10]}
local wait, alive = tonumber(ARGV[5]), tonumber(ARGV[11])
forget(releaseName(key, owner)) -- whatever the answer: the owner may hold key again
local st = settle(key)

local i = liveHold(st, owner)
if i then
  local h = st.holds[i]
  commit()
  if h.set == 1 then return held(st) end -- one owner, one set: not a single key of it
  -- The holder again: the same grant, not lengthened.
  local e = holdEnd(h)
  local term = 0
  if h.ss == '' then term = e - now end
  return {'G', h.t, e - now, term}
end

local pos = find(st.q, owner)
if pos and st.q[pos].set == 1 then
  commit()
  return held(st)
end
if req.ss ~= '' then
  local s = sessionLive(req.ss)
  if not s then
    if pos then table.remove(st.q, pos); st.changed = true; touch(key) end
    commit()
    return {'S'}
  end
  req.sg = s.g
end

if (#st.holds > 0 or #st.q > 0) and (st.kind ~= req.kind or st.limit ~= req.limit) then
  commit()
  return {'K', st.kind, st.limit}
end

if pos then
  -- Already queued: it keeps its place, and proves it is alive.
  if wait <= 0 then
    table.remove(st.q, pos)
    st.changed = true
    touch(key)
    commit()
    return held(st)
  end
  st.q[pos].a = now + alive
  st.dirty = true
  commit()
  return {'Q', nextDeadline(st), lastWake(owner)}
end

if #st.holds == 0 and #st.q == 0 then st.kind, st.limit = req.kind, req.limit end
if #st.q == 0 and fits(st, req) then
  local h = grant(key, st, req)
  commit()
  local e = holdEnd(h)
  local term = 0
  if h.ss == '' then term = req.ttl end
  return {'G', h.t, e - now, term}
end
if wait <= 0 then
  commit()
  return held(st)
end
if #st.q >= MAX_WAITERS then
  commit()
  return {'F', #st.q}
end
req.w, req.a = now + wait, now + alive
table.insert(st.q, req)
if req.ss ~= '' then bindSession(req.ss, key) end
st.changed = true
commit()
return {'Q', nextDeadline(st), lastWake(owner)}
