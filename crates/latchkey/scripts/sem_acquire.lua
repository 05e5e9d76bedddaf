-- Take permits from a semaphore kept in Redisson's RSemaphore layout.
-- KEYS: the available permits (a string holding an integer: Redisson's RSemaphore key),
-- latchkey's record of the total permits (absent when a Redisson client set it up).
-- ARGV: how many permits to take (>= 1).
-- Returns {1, available_after} when taken, {0, available} when there are not enough, {-1} when
-- the semaphore was never set up. A key of another type, or a string that is not an integer,
-- is refused. More permits available than the record says means a Redisson client added some
-- (it never updates the record): the record is raised to the available count, so that giving
-- back the permits taken here is not mistaken for an over-release.
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
