-- Add permits to a permit-expirable semaphore, or take some away with a negative delta.
--
-- KEYS[1]  the available permits (string holding an integer)
-- KEYS[2]  the leases: zset of permit id -> lease end (server ms)
-- KEYS[3]  the wake-up channel: redisson_sc:{<name>}
-- ARGV[1]  the delta (an integer, may be negative)
-- ARGV[2]  the largest total allowed
-- ARGV[3]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- The total is the available count plus the leases out (after ended leases are reclaimed).
-- Returns {1, available_after} (published), {-1, total} when the total would go below zero,
-- {-2, total} when it would exceed ARGV[2]; nothing but the reclaim changes in those cases.
local publish = publish_command(ARGV[3])
acl_check({'get', 'incrby', 'time', 'type', 'zcard', 'zrangebyscore',
    'zrem'}, publish, {KEYS[3]})
local available = expect_count(KEYS[1], 'the semaphore key') or 0
expect_type(KEYS[2], 'zset', 'the permit leases')
local now = now_ms()
available = reclaim(KEYS[1], KEYS[2], KEYS[3], publish, now, available)
local total = available + redis.call('zcard', KEYS[2])
local delta = tonumber(ARGV[1])
if total + delta < 0 then
    return {-1, total}
end
if total + delta > tonumber(ARGV[2]) then
    return {-2, total}
end
local value = redis.call('incrby', KEYS[1], delta)
notify(publish, KEYS[3], value)
return {1, value}
