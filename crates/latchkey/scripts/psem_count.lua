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
available = reclaim(KEYS[1], KEYS[2], KEYS[3], publish, now, available)
return {available, redis.call('zcard', KEYS[2])}
