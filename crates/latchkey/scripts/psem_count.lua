-- Count the permits of a permit-expirable semaphore, reclaiming ended leases first.
-- ARGV: publish. Returns {available, leased}.
local available = counted(publish_command(ARGV[1]))
return {available, redis.call('zcard', KEYS[2])}
