-- session: ARGV op, id, ttl, lock-delay.
--   create  answers {remaining, ttl}: a live session as it is (a retry),
--           else a new one (a record kept for an expired one's lock-delay
--           is replaced, and the holds it kept end).
--   renew   answers {remaining, ttl}, or {} when the session has ended.
--   destroy ends the session and every hold and wait bound to it, each key
--           handed on; answers 1, or 0 when it had already ended.
--   inspect answers {ttl, remaining, lock-delay, keys}, or {} when ended.
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
  if s then return {s.x - now, s.ttl} end
  local ttl, d = tonumber(ARGV[4]), tonumber(ARGV[5])
  redis.call('DEL', k, k .. ':k')
  redis.call('HSET', k, 'x', num(now + ttl), 'ttl', num(ttl), 'd', num(d), 'g', num(now))
  keep(ttl, d)
  return {ttl, ttl}
end
if not s then
  if op == 'destroy' then return 0 end
  return {}
end
local keys = redis.call('SMEMBERS', k .. ':k')
if op == 'renew' then
  redis.call('HSET', k, 'x', num(now + s.ttl))
  keep(s.ttl, s.d)
  -- The session's keys' state must outlast it too.
  local ms = math.floor((s.ttl + s.d) / 1000) + 60000
  for _, key in ipairs(keys) do
    local left = redis.call('PTTL', skey(key))
    if left >= 0 and left < ms then redis.call('PEXPIRE', skey(key), ms) end
  end
  return {s.ttl, s.ttl}
end
if op == 'destroy' then
  redis.call('DEL', k, k .. ':k')
  sessions[id] = false
  for _, key in ipairs(keys) do
    settle(key)
  end
  commit()
  return 1
end
-- inspect: count the keys still bound to this generation, forget the rest.
local n = 0
for _, key in ipairs(keys) do
  local st = load(key)
  local bound = false
  for _, list in ipairs({st.holds, st.q}) do
    for _, e in ipairs(list) do
      if e.ss == id and e.sg == s.g then bound = true end
    end
  end
  if bound then n = n + 1 else redis.call('SREM', k .. ':k', key) end
end
return {s.ttl, s.x - now, s.d, n}
