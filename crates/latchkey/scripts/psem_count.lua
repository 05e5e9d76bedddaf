-- Count the permits of a permit-expirable semaphore, reclaiming ended leases first.
--
-- KEYS[1]  the available permits (string holding an integer)
-- KEYS[2]  the leases: zset of permit id -> lease end (server ms)
-- KEYS[3]  the wake-up channel: redisson_sc:{<name>}
-- ARGV[1]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns {available, leased}.
local publish = publish_command(ARGV[1])
acl_check({'get', 'incrby', 'time', 'type', 'zcard', 'zrangebyscore',
    'zrem'}, publish, {KEYS[3]})
local available = expect_count(KEYS[1], 'the semaphore key') or 0
expect_type(KEYS[2], 'zset', 'the permit leases')
local now = now_ms()
local ended = redis.call('zrangebyscore', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
if #ended > 0 then
    for i = 1, #ended, 100 do
        redis.call('zrem', KEYS[2], unpack(ended, i, math.min(i + 99, #ended)))
    end
    available = redis.call('incrby', KEYS[1], #ended)
    if available > 0 then
        notify(publish, KEYS[3], available)
    end
end
return {available, redis.call('zcard', KEYS[2])}
