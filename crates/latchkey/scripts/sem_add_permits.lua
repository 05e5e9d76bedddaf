-- Add permits to a semaphore, or take some away with a negative delta (addPermits).
-- KEYS: as sem_release.lua. ARGV: the delta, the largest total allowed, publish.
-- The available count moves by the delta and may go below zero when permits are out (acquirers
-- then wait until enough are released). The total moves by the delta too; a semaphore that does
-- not exist yet starts with total = delta. For a Redisson-made semaphore (no total record) only
-- the available count exists and moves. A record below the available count (a Redisson client
-- added permits; it never updates the record) is first raised to that count.
-- Returns {1, available_after} (published, as Redisson does), {-1, total} when the total would
-- go below zero, {-2, total} when it would exceed ARGV[2]; nothing changes in those cases.
local publish = publish_command(ARGV[3])
acl_check({'get', 'set', 'type'}, publish, {KEYS[3]})
local available = expect_count(KEYS[1], 'the semaphore key')
local total = expect_count(KEYS[2], 'the semaphore total')
if total ~= nil and available ~= nil and available > total then
    total = available
end
local delta = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local new_total = nil
if total ~= nil then
    new_total = total + delta
elseif available == nil then
    new_total = delta
end
-- Without a total record, the available count moves alone.
local check = new_total or available + delta
if check < 0 then
    return {-1, total or available or 0}
end
if check > limit then
    return {-2, total or available or 0}
end
local value = (available or 0) + delta
redis.call('set', KEYS[1], value)
if new_total ~= nil then
    redis.call('set', KEYS[2], new_total)
end
notify(publish, KEYS[3], value)
return {1, value}
