-- Set up a permit-expirable semaphore with a number of permits unless it is set up already
-- (Redisson's RPermitExpirableSemaphore.trySetPermits).
--
-- KEYS[1]  the available permits (string holding an integer)
-- KEYS[2]  the leases: zset of permit id -> lease end (server ms)
-- KEYS[3]  the wake-up channel: redisson_sc:{<name>}
-- ARGV[1]  the number of permits (>= 0)
-- ARGV[2]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns 1 when the permits were set (and published), 0 when the semaphore already existed.
local publish = publish_command(ARGV[2])
acl_check({'exists', 'set', 'type'}, publish, {KEYS[3]})
expect_type(KEYS[1], 'string', 'the semaphore key')
expect_type(KEYS[2], 'zset', 'the permit leases')
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
notify(publish, KEYS[3], ARGV[1])
return 1
