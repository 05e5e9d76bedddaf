-- Add permits to a permit-expirable semaphore, or take some away with a negative delta.
-- ARGV: the delta, the largest total allowed, publish.
-- The total is the available count plus the leases out (after ended leases are reclaimed).
-- Returns {1, available_after} (published), {-1, total} when the total would go below zero,
-- {-2, total} when it would exceed ARGV[2]; nothing but the reclaim changes in those cases.
local publish = publish_command(ARGV[3])
local available = counted(publish)
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
