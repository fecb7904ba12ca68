-- extend: ARGV key, owner, ttl. Answers {token, remaining, term}, or {} when
-- owner does not hold key. A session-bound hold is not changed: it answers
-- what is left of its session (term 0).
local key, owner, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local st = settle(key)
local i = liveHold(st, owner)
if not i then
  save(key, st)
  return {}
end
local h = st.holds[i]
if h.ss ~= '' then
  save(key, st)
  return {h.t, holdEnd(h) - now, 0}
end
h.x, h.ttl = now + ttl, ttl
save(key, st, true)
return {h.t, ttl, ttl}
