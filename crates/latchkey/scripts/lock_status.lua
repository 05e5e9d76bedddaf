-- Read a lock's state in one atomic snapshot (read-only).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the fencing counter
-- KEYS[3]  latchkey's wait queue (zset)
--
-- Returns {holders (flat field/count list), pttl, last fencing token (or -1), waiting clients}.
acl_check({'get', 'hgetall', 'pttl', 'type', 'zcard'})
local lock_type = expect_type(KEYS[1], 'hash', 'lock key')
local holders = {}
if lock_type == 'hash' then
    holders = redis.call('hgetall', KEYS[1])
end
local token = -1
if key_type(KEYS[2]) == 'string' then
    token = tonumber(redis.call('get', KEYS[2])) or -1
end
local waiting = 0
if key_type(KEYS[3]) == 'zset' then
    waiting = redis.call('zcard', KEYS[3])
end
return {holders, redis.call('pttl', KEYS[1]), token, waiting}
