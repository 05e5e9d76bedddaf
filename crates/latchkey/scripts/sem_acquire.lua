-- Take permits from a semaphore kept in Redisson's RSemaphore layout.
--
-- KEYS[1]  the available permits: a string holding an integer (Redisson's RSemaphore key)
-- KEYS[2]  latchkey's record of the semaphore's total permits (string holding an integer);
--          absent when the semaphore was set up by a Redisson client
-- ARGV[1]  how many permits to take (>= 1)
--
-- Returns {1, available_after} when the permits were taken, {0, available} when there are not
-- enough, {-1} when the semaphore was never set up (no count key). A key of another type, or a
-- string that is not an integer, is an error and nothing changes.
--
-- More permits available than the record says means a Redisson client added some (it never
-- updates the record): the record is raised to the available count, so that releasing the
-- permits taken here later is not mistaken for an over-release.
acl_check({'decrby', 'get', 'set', 'type'})
local available = expect_count(KEYS[1], 'the semaphore key')
local total = expect_count(KEYS[2], 'the semaphore total')
if available == nil then
    return {-1}
end
local want = tonumber(ARGV[1])
if available >= want then
    if total ~= nil and available > total then
        redis.call('set', KEYS[2], available)
    end
    return {1, redis.call('decrby', KEYS[1], want)}
end
return {0, available}
