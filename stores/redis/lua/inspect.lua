-- inspect: ARGV key. Answers view(key).
local key = ARGV[2]
local st = settle(key)
commit()
return view(st)
