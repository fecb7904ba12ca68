-- extend: ARGV key, owner, ttl. Answers {token, remaining, term}, or {} when
-- owner does not hold key. A session-bound hold is not changed: it answers
-- what is left of its session (term 0). A multi-key set's lease is
-- extended on every key of the set.
local key, owner, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local st = settle(key)
local i = liveHold(st, owner)
if not i then
  commit()
  return {}
end
local h = st.holds[i]
if h.ss ~= '' then
  commit()
  return {h.t, holdEnd(h) - now, 0}
end
local keys = {key}
if h.set == 1 then
  local rec = setRecord(owner)
  if rec then
    keys = rec.keys
    putSet(owner, keys, now + ttl)
  end
end
for _, k in ipairs(keys) do
  local sk = get(k)
  local j = liveHold(sk, owner)
  if j then
    sk.holds[j].x, sk.holds[j].ttl = now + ttl, ttl
    sk.changed = true
  end
end
commit()
return {h.t, ttl, ttl}
