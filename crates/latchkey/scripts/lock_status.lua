-- Read a lock's state in one snapshot (read-only). KEYS: lock hash, fencing counter, wait queue.
-- Returns {holders (flat field/count list), pttl, last fencing token (or -1), waiting clients}.
acl_check({'get', 'hgetall', 'pttl', 'type', 'zcard'})
expect_type(KEYS[1], 'hash', 'lock key')
local holders = redis.call('hgetall', KEYS[1])
local token = -1
if key_type(KEYS[2]) == 'string' then
    token = tonumber(redis.call('get', KEYS[2])) or -1
end
local waiting = 0
if key_type(KEYS[3]) == 'zset' then
    waiting = redis.call('zcard', KEYS[3])
end
return {holders, redis.call('pttl', KEYS[1]), token, waiting}
