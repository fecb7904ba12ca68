-- session: ARGV op, id, ttl, lock-delay.
--   create  answers {remaining, ttl}: a live session as it is (a retry),
--           else a new one (a record kept for an expired one's lock-delay
--           is replaced, and the holds it kept end).
--   renew   answers {remaining, ttl, keys}, or {} when the session has
--           ended.
--   destroy ends the session and every hold and wait bound to it, each key
--           handed on; answers 1, or 0 when it had already ended, but 1
--           again, changing nothing, when a destroy ended it (remember).
--   inspect answers {ttl, remaining, lock-delay, keys}, or {} when ended.
-- keys is how many keys the session holds or waits for.
local op, id = ARGV[2], ARGV[3]
local k = P .. 's:' .. id
local s = sessionLive(id)

-- keep makes the session's record (and its keys) outlast its TTL and
-- lock-delay by a minute.
local function keep(ttl, d)
  local ms = math.floor((ttl + d) / 1000) + 60000
  redis.call('PEXPIRE', k, ms)
  redis.call('PEXPIRE', k .. ':k', ms)
end

if op == 'create' then
  forget(destroyName(id))
  if s then return {s.x - now, s.ttl} end
  local ttl, d = tonumber(ARGV[4]), tonumber(ARGV[5])
  redis.call('DEL', k, k .. ':k')
  redis.call('HSET', k, 'x', num(now + ttl), 'ttl', num(ttl), 'd', num(d), 'g', num(now))
  keep(ttl, d)
  return {ttl, ttl}
end
if not s then
  if op == 'destroy' then
    if recalls(destroyName(id)) then return 1 end
    return 0
  end
  return {}
end
local keys = redis.call('SMEMBERS', k .. ':k')
if op == 'destroy' then
  redis.call('DEL', k, k .. ':k')
  sessions[id] = false
  for _, key in ipairs(keys) do
    settle(key)
  end
  commit()
  remember(destroyName(id))
  return 1
end

-- bound is the keys the session (this generation of it) still holds, or
-- waits for with a wait and a waiter still alive; the others leave its
-- keys (a force-release, say, ended its hold there).
local function bound()
  local out = {}
  for _, key in ipairs(keys) do
    local st = load(key)
    local found = false
    for _, h in ipairs(st.holds) do
      if h.ss == id and h.sg == s.g then found = true end
    end
    for _, w in ipairs(st.q) do
      if w.ss == id and w.sg == s.g and w.w > now and w.a > now then found = true end
    end
    if found then table.insert(out, key) else redis.call('SREM', k .. ':k', key) end
  end
  return out
end

if op == 'renew' then
  redis.call('HSET', k, 'x', num(now + s.ttl))
  keep(s.ttl, s.d)
  -- The session's keys' state must outlast it too.
  local ms = math.floor((s.ttl + s.d) / 1000) + 60000
  local held = bound()
  for _, key in ipairs(held) do
    local left = redis.call('PTTL', skey(key))
    if left >= 0 and left < ms then redis.call('PEXPIRE', skey(key), ms) end
  end
  return {s.ttl, s.ttl, #held}
end
-- inspect
return {s.ttl, s.x - now, s.d, #bound()}
