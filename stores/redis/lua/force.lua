-- force: ARGV key. Ends every hold on key, whoever holds it (a multi-key
-- set's on all its keys), and hands the key on; answers the newest token
-- it ended, 0 when nobody held key.
local key = ARGV[2]
local st = settle(key)
local token = 0
local kept = {}
for _, h in ipairs(st.holds) do
  if h.dl == 1 then
    table.insert(kept, h)
  else
    token = math.max(token, h.t)
    if h.set == 1 then endSet(h.o, key) end
  end
end
if token > 0 then
  st.holds = kept
  st.changed = true
  touch(key)
end
commit()
return token
