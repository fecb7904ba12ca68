-- inspect: ARGV key. Answers view(key).
local key = ARGV[2]
local st = settle(key)
save(key, st)
return view(st)
