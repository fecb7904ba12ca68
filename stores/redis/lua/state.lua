-- The state of every key and session, and the steps every script shares.
-- Each script is this file followed by its own body, run by EVALSHA: one
-- atomic step on the Redis server, so that no other client sees a state
-- between two of its writes.
--
-- ARGV[1] is the prefix of every Redis key the store keeps:
--   P..'k:'..key   the key's state, a MessagePack map (see load)
--   P..'idx'       a sorted set of every key with state, for List (by name)
--   P..'token'     the last fencing token issued
--   P..'ver'       the last change index (watches)
--   P..'s:'..id    a session: hash of x (expiry), ttl, d (lock-delay), g
--                  (generation); P..'s:'..id..':k' the keys it holds or
--                  waits for
--   P..'set:'..owner the keys of owner's multi-key set, held or waited for
--   P..'w:'..owner the wake-up stream of a waiting acquire
--   P..'log'       the last few thousand changes: a stream of the key each
--                  change index changed (ID <index>-1)
--   P..'chg'       the pub/sub channel that names each key that changed
--   P..'rel'       the remembered releases: a sorted set of names (owner
--                  ':' key, or 's:' session ID for a destroy) by the time
--                  of the release (see remember)
-- Times are microseconds of the Redis server's clock (TIME), which is also
-- the clock Redis expires keys by.
local P = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local WAKE_TTL = 60000 -- ms a wake-up is kept for a waiter that has not read it yet

-- num is n as Redis should store it: Lua would write a number of more
-- than 14 digits in exponent form, losing its last digits.
local function num(n) return string.format('%.0f', n) end

local function skey(key) return P .. 'k:' .. key end

-- load is key's state: kind (0 mutex, 1 semaphore, 2 read/write) and
-- limit; holds in grant order, each {o owner, t token, x expiry (0 when
-- bound to a session), m metadata, s shared (1/0), ttl, ss session, sg its
-- generation}; q, the FIFO queue, each {o, ttl, w wait deadline, a alive
-- deadline, m, s, ss, sg}; v, the change index of its last change.
local function load(key)
  local raw = redis.call('GET', skey(key))
  if not raw then return {kind = 0, limit = 0, holds = {}, q = {}, v = 0} end
  local st = cmsgpack.unpack(raw)
  st.holds = st.holds or {}
  st.q = st.q or {}
  return st
end

local sessions = {}
-- session is id's record, false when there is none.
local function session(id)
  if sessions[id] == nil then
    local r = redis.call('HMGET', P .. 's:' .. id, 'x', 'ttl', 'd', 'g')
    if r[1] then
      sessions[id] = {x = tonumber(r[1]), ttl = tonumber(r[2]), d = tonumber(r[3]), g = tonumber(r[4])}
    else
      sessions[id] = false
    end
  end
  return sessions[id]
end

-- sessionLive is the session's record when it is live and of generation g
-- (any generation when g is nil), false otherwise.
local function sessionLive(id, g)
  local s = session(id)
  if s and s.x > now and (g == nil or s.g == g) then return s end
  return false
end

-- holdEnd is when h ends and whether only a lock-delay keeps it: its own
-- expiry, or its session's (a session gone ends it now).
local function holdEnd(h)
  if h.ss == nil or h.ss == '' then return h.x, false end
  local s = session(h.ss)
  if not s or s.g ~= h.sg then return 0, false end
  if s.x > now then return s.x, false end
  return s.x + s.d, s.d > 0
end

-- wake tells a waiting owner to look again; with a token, that it was
-- granted the key with that token and remaining left (microseconds, at
-- this step), so that it need not look.
local function wake(owner, token, remaining)
  local k = P .. 'w:' .. owner
  if token then
    redis.call('XADD', k, 'MAXLEN', '1', '*', 't', num(token), 'r', num(remaining))
  else
    redis.call('XADD', k, 'MAXLEN', '1', '*', 'w', '1')
  end
  redis.call('PEXPIRE', k, WAKE_TTL)
end

-- Remembered releases. A release whose answer was lost is sent again by
-- its owner, who by then holds nothing; so that the repeat answers as the
-- first did, each release that ended its owner's own hold (a lease, a
-- semaphore or read/write slot, a multi-key set under the key the release
-- named) and each destroy that ended a session is remembered, never an
-- expiry, a force-release or a waiter giving up. An acquire by the owner
-- of the key (a create of the session) forgets it: after acquire, release,
-- acquire and expiry, the release finds nothing. As in the cluster, a
-- release is forgotten RELEASE_MEMORY after it, and beyond MAX_RELEASES
-- the oldest goes first; the set expires when no release has been
-- remembered for RELEASE_MEMORY.
local function releaseName(key, owner) return owner .. ':' .. key end
local function destroyName(id) return 's:' .. id end

local function remember(name)
  local k = P .. 'rel'
  redis.call('ZREMRANGEBYSCORE', k, '-inf', num(now - RELEASE_MEMORY))
  redis.call('ZADD', k, num(now), name)
  local over = redis.call('ZCARD', k) - MAX_RELEASES
  if over > 0 then redis.call('ZPOPMIN', k, over) end
  redis.call('PEXPIRE', k, math.floor(RELEASE_MEMORY / 1000))
end

-- recalls reports whether the release name is remembered.
local function recalls(name)
  local at = redis.call('ZSCORE', P .. 'rel', name)
  return at and tonumber(at) + RELEASE_MEMORY > now
end

local function forget(name) redis.call('ZREM', P .. 'rel', name) end

local function nextToken()
  -- Never below the server's clock in microseconds: a counter that lost
  -- its last writes (a restart without fsync, a failover to a replica that
  -- lagged, FLUSHALL) still issues tokens above the ones it lost, as long
  -- as the clock did not go back and grants averaged under one a
  -- microsecond.
  local c = tonumber(redis.call('GET', P .. 'token') or '0')
  local tk = math.max(c + 1, now)
  redis.call('SET', P .. 'token', num(tk))
  return tk
end

-- fits reports whether e (a request or a waiter) can hold key now.
local function fits(st, e)
  local n = #st.holds
  if n == 0 then return true end
  if st.kind == 1 then return n < st.limit end
  if st.kind == 2 and e.s == 1 and n < MAX_HOLDERS then
    for _, h in ipairs(st.holds) do
      if h.s ~= 1 then return false end
    end
    return true
  end
  return false
end

-- bindSession records that session id holds or waits for key; the record
-- lasts as long as the session's own.
local function bindSession(id, key)
  local sk = P .. 's:' .. id
  redis.call('SADD', sk .. ':k', key)
  local ttl = redis.call('PTTL', sk)
  if ttl > 0 then redis.call('PEXPIRE', sk .. ':k', ttl) end
end

local function grant(key, st, e)
  local h = {o = e.o, t = nextToken(), x = 0, m = e.m, s = e.s, ttl = e.ttl, ss = e.ss, sg = e.sg}
  if e.ss == '' then h.x = now + e.ttl end
  table.insert(st.holds, h)
  if e.ss ~= '' then bindSession(e.ss, key) end
  st.changed = true
  return h
end

-- Multi-key sets: P..'set:'..owner keeps the keys of owner's set, held or
-- waited for; each key's state has the set's hold or waiter like any
-- other, marked set = 1.
local sets = {}

-- setRecord is owner's set, {keys = ...}, or false.
local function setRecord(owner)
  if sets[owner] == nil then
    local raw = redis.call('GET', P .. 'set:' .. owner)
    sets[owner] = raw and cmsgpack.unpack(raw) or false
  end
  return sets[owner]
end

-- putSet keeps owner's set until a minute past untilUs.
local function putSet(owner, keys, untilUs)
  local rec = {keys = keys}
  redis.call('SET', P .. 'set:' .. owner, cmsgpack.pack(rec), 'PX', math.floor((untilUs - now) / 1000) + 60000)
  sets[owner] = rec
end

local function dropSet(owner)
  redis.call('DEL', P .. 'set:' .. owner)
  sets[owner] = false
end

-- A step reads each key once (get), changes the states in memory, and
-- writes the changed ones at its end (commit). pending are the keys whose
-- queue may have a head to grant.
local cache, order, pending = {}, {}, {}

-- get is key's state at now: ended holds and waiters whose wait, liveness
-- or session ran out removed (each such waiter woken, to learn it).
local function get(key)
  local st = cache[key]
  if st then return st end
  st = load(key)
  st.changed, st.dirty = false, false
  local holds = {}
  for _, h in ipairs(st.holds) do
    local e, delayed = holdEnd(h)
    if e > now then
      h.dl = delayed and 1 or 0
      table.insert(holds, h)
    else
      st.changed = true
    end
  end
  st.holds = holds
  local q = {}
  for _, w in ipairs(st.q) do
    if w.w <= now or w.a <= now or (w.ss ~= '' and not sessionLive(w.ss, w.sg)) then
      st.changed = true
      wake(w.o)
    else
      table.insert(q, w)
    end
  end
  st.q = q
  cache[key] = st
  table.insert(order, key)
  pending[key] = true
  return st
end

local function touch(key) pending[key] = true end

-- grantSet grants the set waiter w every key of its set if it heads every
-- key's queue and nobody holds any: true if granted, 'drop' if its set is
-- gone (the server lost it), false if it must wait (its free keys stay
-- reserved for it).
local function grantSet(w)
  local rec = setRecord(w.o)
  if not rec then return 'drop' end
  for _, k in ipairs(rec.keys) do
    local sk = get(k)
    if #sk.holds > 0 or #sk.q == 0 or sk.q[1].o ~= w.o then return false end
  end
  local t = nextToken()
  for _, k in ipairs(rec.keys) do
    local sk = cache[k]
    table.remove(sk.q, 1)
    table.insert(sk.holds, {o = w.o, t = t, x = now + w.ttl, m = w.m, s = 0, ttl = w.ttl, ss = '', set = 1})
    sk.changed = true
  end
  putSet(w.o, rec.keys, now + w.ttl)
  wake(w.o, t, w.ttl)
  return true
end

-- grantHeads grants every waiter at the head of the queue that fits, in
-- order, and wakes each: the hand-off happens in the step that made room.
local function grantHeads(key, st)
  while #st.q > 0 and fits(st, st.q[1]) do
    local w = st.q[1]
    if w.set == 1 then
      local granted = grantSet(w)
      if granted == 'drop' then
        table.remove(st.q, 1)
        st.changed = true
        wake(w.o)
      elseif not granted then
        return
      end
    else
      table.remove(st.q, 1)
      local h = grant(key, st, w)
      wake(w.o, h.t, holdEnd(h) - now)
    end
  end
end

-- pump grants the heads of every pending key, and of the keys that
-- granting reads in turn.
local function pump()
  while true do
    local key = next(pending)
    if key == nil then return end
    pending[key] = nil
    grantHeads(key, cache[key])
  end
end

-- settle is key's state at now, with the room it has handed to its queue.
local function settle(key)
  local st = get(key)
  pump()
  return st
end

-- write writes st back (deletes it when nobody holds or waits). A change
-- (notify) takes a new change index and is published for watches.
local function write(key, st, notify)
  local k = skey(key)
  local v = st.v
  if notify then v = redis.call('INCR', P .. 'ver') end
  if #st.holds == 0 and #st.q == 0 then
    if redis.call('DEL', k) == 1 then redis.call('ZREM', P .. 'idx', key) end
  else
    -- The Redis key outlives every deadline in it (a minute's margin), so
    -- that state nobody touches again does not stay forever: a
    -- session-bound hold's is its session's end and lock-delay, which a
    -- renew pushes out on the session's keys.
    local far = now
    for _, h in ipairs(st.holds) do
      local e = holdEnd(h)
      far = math.max(far, e)
      if h.ss ~= '' then
        local s = session(h.ss)
        if s then far = math.max(far, s.x + s.d) end
      end
    end
    for _, w in ipairs(st.q) do
      far = math.max(far, w.w)
    end
    local dl = {}
    for i, h in ipairs(st.holds) do dl[i] = h.dl; h.dl = nil end
    local raw = cmsgpack.pack({kind = st.kind, limit = st.limit, holds = st.holds, q = st.q, v = v})
    for i, h in ipairs(st.holds) do h.dl = dl[i] end
    redis.call('SET', k, raw, 'PX', math.floor((far - now) / 1000) + 60000)
    redis.call('ZADD', P .. 'idx', 0, key)
  end
  if notify then
    -- The change log (watches): one entry per change index, so that a
    -- watch tells a change it did not hear of from one it did.
    redis.call('XADD', P .. 'log', 'MAXLEN', '~', '4096', num(v) .. '-1', 'k', key)
    redis.call('PUBLISH', P .. 'chg', key)
  end
  st.v = v
end

-- commit ends a step: the pending grants, then every state it changed
-- written back (dirty: written without telling watchers).
local function commit()
  pump()
  for _, key in ipairs(order) do
    local st = cache[key]
    if st.changed or st.dirty then
      write(key, st, st.changed)
      st.changed, st.dirty = false, false
    end
  end
end

local function find(list, owner)
  for i, e in ipairs(list) do
    if e.o == owner then return i end
  end
  return nil
end

-- liveHold is the index of owner's hold on st that a lock-delay does not
-- merely keep, nil if none.
local function liveHold(st, owner)
  for i, h in ipairs(st.holds) do
    if h.o == owner and h.dl ~= 1 then return i end
  end
  return nil
end

-- view is what anyone may learn of st (never an owner):
-- {locked, token, remaining, waiters, metadata, delayed, kind, limit,
--  holders, shared, holds, set keys, reserved}, holds (for a semaphore or
-- read/write lock) each {token, remaining, metadata, shared, delayed}, set
-- keys those of the holder's multi-key set, reserved 1 when nobody holds
-- the key and a waiting set keeps it.
local function view(st)
  local n = #st.holds
  if n == 0 then
    local reserved = 0
    if #st.q > 0 then reserved = 1 end -- a head that fits an empty key is granted: it waits for another key
    return {0, 0, 0, #st.q, '', 0, 0, 0, 0, 0, {}, {}, reserved}
  end
  if st.kind == 0 then
    local h = st.holds[1]
    local e, delayed = holdEnd(h)
    if delayed then return {1, h.t, e - now, #st.q, '', 1, 0, 0, 0, 0, {}, {}, 0} end
    local keys = {}
    if h.set == 1 then
      local rec = setRecord(h.o)
      if rec then keys = rec.keys end
    end
    return {1, h.t, e - now, #st.q, h.m, 0, 0, 0, 1, 0, {}, keys, 0}
  end
  local holds, token, longest, allDelayed, shared = {}, 0, 0, 1, 1
  for _, h in ipairs(st.holds) do
    local e, delayed = holdEnd(h)
    token = math.max(token, h.t)
    longest = math.max(longest, e - now)
    if not delayed then allDelayed = 0 end
    if h.s ~= 1 then shared = 0 end
    local m = h.m
    if delayed then m = '' end
    table.insert(holds, {h.t, e - now, m, h.s, delayed and 1 or 0})
  end
  if st.kind ~= 2 then shared = 0 end
  return {1, token, longest, #st.q, '', allDelayed, st.kind, st.limit, n, shared, holds, {}, 0}
end

-- held is the answer to an acquire that may not wait: the newest holder's
-- token and the longest hold left (none when nobody holds), and whether a
-- waiting set keeps the key.
local function held(st)
  local v = view(st)
  return {'H', v[2], v[3], v[13]}
end

-- nextDeadline is how long until the earliest hold on st ends (or -1 if
-- none does): how long a waiter may block before it looks again.
local function nextDeadline(st)
  local soonest = -1
  for _, h in ipairs(st.holds) do
    local e = holdEnd(h)
    if soonest < 0 or e < soonest then soonest = e end
  end
  if soonest < 0 then return -1 end
  return math.max(soonest - now, 0)
end

-- lastWake is the ID of the last wake-up of owner's stream: the waiter
-- reads the wake-ups after it, so that none sent after this step is missed.
local function lastWake(owner)
  local last = redis.call('XREVRANGE', P .. 'w:' .. owner, '+', '-', 'COUNT', 1)
  if #last > 0 then return last[1][1] end
  return '0-0'
end

-- endSet ends owner's multi-key set, held or waited for, on every key of it
-- (key alone when the server lost the set's record), each key handed on.
local function endSet(owner, key)
  local rec = setRecord(owner)
  local keys = {key}
  if rec then keys = rec.keys end
  for _, k in ipairs(keys) do
    local sk = get(k)
    local i = find(sk.holds, owner)
    if i then table.remove(sk.holds, i); sk.changed = true end
    local j = find(sk.q, owner)
    if j then table.remove(sk.q, j); sk.changed = true end
    touch(k)
  end
  dropSet(owner)
end
