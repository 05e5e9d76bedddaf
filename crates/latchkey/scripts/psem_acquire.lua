-- Take permits with leases from a permit-expirable semaphore (Redisson's
-- RPermitExpirableSemaphore layout).
--
-- KEYS[1]  the available permits: a string holding an integer
-- KEYS[2]  the leases: a zset of permit id (16 raw bytes) -> lease end (server ms); Redisson's
--          `{<name>}:timeout`
-- KEYS[3]  the wake-up channel: redisson_sc:{<name>}
-- ARGV[1]  the lease in milliseconds
-- ARGV[2]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
-- ARGV[3…] one new permit id per permit wanted, as 32 hex digits
--
-- Leases that have ended are reclaimed first (their permits become available again, and the new
-- available count is published). Returns {1, available_after} when the permits were taken,
-- otherwise {0, available, ms_until_the_next_lease_ends} (-1 when no lease is out).
-- Deadlines come from the server clock (TIME). Key types are checked before the first write.
local publish = ARGV[2]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
acl_check({'decrby', 'exists', 'get', 'incrby', 'time', 'type', 'zadd', 'zrange', 'zrangebyscore',
    'zrem'}, publish, {KEYS[3]})
local function check(key, want, what)
    local t = redis.call('type', key)['ok']
    if t ~= 'none' and t ~= want then
        return redis.error_reply('WRONGTYPE ' .. what .. ' holds a ' .. t .. ', not a ' .. want)
    end
    return t
end
local err = check(KEYS[1], 'string', 'the semaphore key')
if type(err) == 'table' then return err end
err = check(KEYS[2], 'zset', 'the permit leases')
if type(err) == 'table' then return err end
local available = 0
if redis.call('exists', KEYS[1]) == 1 then
    available = tonumber(redis.call('get', KEYS[1]))
    if available == nil then
        return redis.error_reply('WRONGTYPE the semaphore key holds a string that is not a count')
    end
end

local function unhex(h)
    return (h:gsub('..', function(cc) return string.char(tonumber(cc, 16)) end))
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Reclaim ended leases (at most 1000 per call, so a call stays short).
local ended = redis.call('zrangebyscore', KEYS[2], '-inf', now, 'LIMIT', 0, 1000)
if #ended > 0 then
    for i = 1, #ended, 100 do
        redis.call('zrem', KEYS[2], unpack(ended, i, math.min(i + 99, #ended)))
    end
    available = redis.call('incrby', KEYS[1], #ended)
    if available > 0 then
        redis.call(publish, KEYS[3], available)
    end
end

local want = #ARGV - 2
if available >= want then
    redis.call('decrby', KEYS[1], want)
    local ends = now + tonumber(ARGV[1])
    for i = 3, #ARGV do
        redis.call('zadd', KEYS[2], ends, unhex(ARGV[i]))
    end
    return {1, available - want}
end
local next_end = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
local wait = -1
if next_end[2] then
    wait = math.max(0, tonumber(next_end[2]) - now)
end
return {0, available, wait}
