-- Give permits back to a permit-expirable semaphore by id, and wake waiters.
-- ARGV: publish, then the permit ids (32 hex digits).
-- Ended leases are reclaimed first, so an expired id is unknown. Known ids are released (their
-- permits become available, the new count is published); returns the ids that were unknown
-- (never issued, already released, or expired): empty when every id was released.
local publish = publish_command(ARGV[1])
acl_check({'get', 'incrby', 'time', 'type', 'zrangebyscore', 'zrem'}, publish, {KEYS[3]})
expect_count(KEYS[1], 'the semaphore key')
expect_type(KEYS[2], 'zset', 'the permit leases')
local now = now_ms()
local returned = drop_ended(KEYS[2], now)
local unknown = {}
for i = 2, #ARGV do
    if redis.call('zrem', KEYS[2], unhex(ARGV[i])) == 1 then
        returned = returned + 1
    else
        unknown[#unknown + 1] = ARGV[i]
    end
end
if returned > 0 then
    local value = redis.call('incrby', KEYS[1], returned)
    if value > 0 then
        notify(publish, KEYS[3], value)
    end
end
return unknown
