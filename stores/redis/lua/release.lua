-- release: ARGV key, owner, cancel. Ends owner's hold on key (on every key
-- of its set, for a multi-key set) and hands each key on; answers 1, or 0
-- when owner held nothing, and 1 again, changing nothing, when it repeats
-- a release that ended owner's hold (remember). With cancel set it also
-- takes owner out of the queue (of every key of its set): a waiting
-- acquire giving up, which is not remembered and answers no repeat.
local key, owner = ARGV[2], ARGV[3]
local st = settle(key)
local released = 0
local i = liveHold(st, owner)
local pos = nil
if ARGV[4] == '1' then pos = find(st.q, owner) end
if (i and st.holds[i].set == 1) or (pos and st.q[pos].set == 1) then
  endSet(owner, key)
  if i then released = 1 end
else
  if pos then table.remove(st.q, pos); st.changed = true end
  if i then
    table.remove(st.holds, i)
    st.changed = true
    released = 1
  end
  touch(key)
end
commit()
if ARGV[4] ~= '1' then
  if released == 1 then
    remember(releaseName(key, owner))
  elseif recalls(releaseName(key, owner)) then
    released = 1
  end
end
return released
