-- Take permits with leases from a permit-expirable semaphore.
-- ARGV: the lease ms, publish, then one new permit id per permit wanted (32 hex digits).
-- Ended leases are reclaimed first. Returns {1, available_after} when the permits were taken,
-- otherwise {0, available, ms_until_the_next_lease_ends} (-1 when no lease is out), or {-1}
-- when the semaphore was never set up (no count key and no lease).
local publish = publish_command(ARGV[2])
acl_check({'decrby', 'get', 'incrby', 'time', 'type', 'zadd', 'zrange', 'zrangebyscore',
    'zrem'}, publish, {KEYS[3]})
local available = expect_count(KEYS[1], 'the semaphore key')
if expect_type(KEYS[2], 'zset', 'the permit leases') == 'none' and available == nil then
    return {-1}
end
available = available or 0
local now = now_ms()
available = reclaim(KEYS[1], KEYS[2], KEYS[3], publish, now, available)
local want = #ARGV - 2
if available >= want then
    redis.call('decrby', KEYS[1], want)
    local ends = now + tonumber(ARGV[1])
    for i = 3, #ARGV do
        redis.call('zadd', KEYS[2], ends, unhex(ARGV[i]))
    end
    return {1, available - want}
end
local next_end = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
local wait = -1
if next_end[2] then
    wait = math.max(0, tonumber(next_end[2]) - now)
end
return {0, available, wait}
