-- inspect: ARGV key. Answers view(key) and the key's change index.
local key = ARGV[2]
local st = settle(key)
save(key, st)
local v = view(st)
table.insert(v, st.v)
return v
