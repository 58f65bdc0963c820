"""The Lua scripts the detector's hot state runs in Redis (adapters/hotstate.py registers them; its docstring
names the keys they read and write). Each runs atomically, in one round trip."""

HEARD_LUA = """
-- KEYS: the heard hash. ARGV: node, published at, interval. Keeps the latest publication time (a
-- redelivered or late heartbeat never makes a silent node look alive again).
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local at = tonumber(string.match(old, '^(%S+)'))
  if at and at >= tonumber(ARGV[2]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
return 1
"""

FOLLOW_LUA = """
-- KEYS: the followed set, its version. ARGV: SADD or SREM, the job. The version changes only when the set does.
if redis.call(ARGV[1], KEYS[1], ARGV[2]) == 1 then
  redis.call('INCR', KEYS[2])
end
return 0
"""

TRACK_LUA = """
-- KEYS: the job's hash, the followed set, its version, the job's progress state, the hang deadlines,
-- the report lines after the progress state.
-- ARGV: the job, '1' to forget its progress state and deadline (a finished attempt) or '0', then the
-- hash's field, value pairs. The version changes only when the set does (as FOLLOW_LUA).
if #ARGV > 2 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
  redis.call('INCR', KEYS[3])
end
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[4], KEYS[6])
  redis.call('ZREM', KEYS[5], ARGV[1])
end
return 0
"""

# Both scripts make their key names from the cluster and job ids (a standalone Redis, as relaunch uses,
# allows that; a Redis Cluster would not).
READ_PROGRESS_LUA = """
-- ARGV: the cluster, the hash fields to read, the job ids, and per job the token of the state the
-- caller holds ('-' for none); the last three separated by spaces.
-- Returns per job: the fields, the state ('=' when it is the very state the caller holds, false when
-- there is none) and the report lines after it (false when none, or when the caller holds the state).
-- A held token is '<write token>+<length of the report lines after it>'.
local c = ARGV[1]
local fields = {}
for f in string.gmatch(ARGV[2], '%S+') do fields[#fields + 1] = f end
local held = {}
for t in string.gmatch(ARGV[4], '%S+') do held[#held + 1] = t end
local out = {}
local n = 0
for id in string.gmatch(ARGV[3], '%S+') do
  n = n + 1
  out[#out + 1] = redis.call('HMGET', 'rl:job:' .. c .. ':' .. id, unpack(fields))
  local key, dkey = 'rl:prog:' .. c .. ':' .. id, 'rl:progd:' .. c .. ':' .. id
  local token, length = string.match(held[n], '^([^+]+)%+(%d+)$')
  -- the state's first bytes only, where the caller holds one: most reports' states are never sent, and
  -- a whole one (about 2 KB) made into a Lua string for each had cost Redis more than the rest of this
  if token and redis.call('GETRANGE', key, 0, #token) == token .. ' '
      and redis.call('STRLEN', dkey) == tonumber(length) then
    out[#out + 1] = '='
    out[#out + 1] = false
  else
    out[#out + 1] = redis.call('GET', key)
    out[#out + 1] = redis.call('GET', dkey)
  end
end
return out
"""

SAVE_PROGRESS_LUA = """
-- ARGV: the TTL, the cluster, one line per job: '<id> <deadline, - disarms> <1 marks progress_seen>
-- <length of its data> <the held token its data extends, - for a whole state>', and the jobs' data one
-- after another, in order: a whole state ('<token> <state>', bytes) or report lines to append.
-- Returns the (1-based) positions of the jobs whose report lines were refused: the state stored is not
-- the one the caller extends (nothing is written for them).
local ttl, c = ARGV[1], ARGV[2]
local deadlines = 'rl:hangdl:' .. c
local states = ARGV[4]
local jobs, total = {}, 0
for line in string.gmatch(ARGV[3], '[^\\n]+') do
  local id, deadline, first, size, after = string.match(line, '^(%S+) (%S+) (%S+) (%d+) (%S+)$')
  if not id then return redis.error_reply('save_progress: a malformed line: ' .. line) end
  jobs[#jobs + 1] = {id, deadline, first, tonumber(size), after}
  total = total + tonumber(size)
end
if total ~= #states then  -- checked before anything is written
  return redis.error_reply('save_progress: ' .. #states .. ' bytes of states, ' .. total .. ' announced')
end
local pos, refused = 1, {}
for i, job in ipairs(jobs) do
  local id, deadline, first, size, after = job[1], job[2], job[3], job[4], job[5]
  local key, dkey = 'rl:prog:' .. c .. ':' .. id, 'rl:progd:' .. c .. ':' .. id
  local data = string.sub(states, pos, pos + size - 1)
  pos = pos + size
  local written = true
  if after == '-' then
    redis.call('SET', key, data, 'EX', ttl)
    redis.call('DEL', dkey)
  else
    local token, length = string.match(after, '^([^+]+)%+(%d+)$')
    if token and redis.call('GETRANGE', key, 0, #token) == token .. ' '
        and redis.call('STRLEN', dkey) == tonumber(length) then
      if length == '0' then
        redis.call('APPEND', dkey, token .. ' ')  -- the state the lines follow
        redis.call('EXPIRE', dkey, ttl)
      end
      redis.call('APPEND', dkey, data)
    else
      refused[#refused + 1] = i
      written = false
    end
  end
  if written then
    if deadline == '-' then
      redis.call('ZREM', deadlines, id)
    else
      redis.call('ZADD', deadlines, deadline, id)
    end
    if first == '1' then
      redis.call('HSET', 'rl:job:' .. c .. ':' .. id, 'progress_seen', '1')
    end
  end
end
return refused
"""
