-- Set up a semaphore's permits unless it is set up already (trySetPermits).
-- KEYS: as sem_release.lua. ARGV: the number of permits (>= 0), publish.
-- Returns 1 when the permits were set (and published), 0 when the semaphore already existed.
local publish = publish_command(ARGV[2])
acl_check({'exists', 'set', 'type'}, publish, {KEYS[3]})
expect_type(KEYS[1], 'string', 'the semaphore key')
expect_type(KEYS[2], 'string', 'the semaphore total')
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], ARGV[1])
notify(publish, KEYS[3], ARGV[1])
return 1
