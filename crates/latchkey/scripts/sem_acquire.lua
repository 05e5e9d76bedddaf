-- Take permits from a semaphore kept in Redisson's RSemaphore layout.
--
-- KEYS[1]  the available permits: a string holding an integer (Redisson's RSemaphore key)
-- ARGV[1]  how many permits to take (>= 1)
--
-- Returns {1, available_after} when the permits were taken, {0, available} when there are not
-- enough (available is 0 when the semaphore was never set up). A key of another type, or a
-- string that is not an integer, is an error and nothing changes.
local t = redis.call('type', KEYS[1])['ok']
if t ~= 'none' and t ~= 'string' then
    return redis.error_reply('WRONGTYPE the semaphore key holds a ' .. t .. ', not a string')
end
local want = tonumber(ARGV[1])
local available = 0
if t == 'string' then
    available = tonumber(redis.call('get', KEYS[1]))
    if available == nil then
        return redis.error_reply('WRONGTYPE the semaphore key holds a string that is not a count')
    end
end
if available >= want then
    return {1, redis.call('decrby', KEYS[1], want)}
end
return {0, available}
