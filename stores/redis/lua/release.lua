-- release: ARGV key, owner, cancel. Ends owner's hold on key and hands the
-- key on; answers 1, or 0 when owner held nothing. With cancel set it
-- also takes owner out of the queue (a waiting acquire giving up).
local key, owner = ARGV[2], ARGV[3]
local st = settle(key)
local released = 0
if ARGV[4] == '1' then
  local pos = find(st.q, owner)
  if pos then table.remove(st.q, pos); st.changed = true end
end
local i = liveHold(st, owner)
if i then
  table.remove(st.holds, i)
  st.changed = true
  released = 1
end
grantHeads(key, st)
save(key, st)
return released
