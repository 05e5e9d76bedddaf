-- Count a count-down latch down by one (Redisson's RCountDownLatch.countDown).
--
-- KEYS[1]  the count (string holding an integer)
-- KEYS[2]  the channel: redisson_countdownlatch__channel__{<name>}
-- ARGV[1]  Redisson's zero-count message ("0")
-- ARGV[2]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns the count left. At zero the key is deleted and the zero-count message published,
-- which opens the latch for every waiter. A latch without a count (never set, or already open)
-- is left alone and 0 returned.
local publish = ARGV[2]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
acl_check({'decr', 'del', 'get', 'type'}, publish, {KEYS[2]})
local t = redis.call('type', KEYS[1])['ok']
if t == 'none' then
    return 0
end
if t ~= 'string' then
    return redis.error_reply('WRONGTYPE the latch key holds a ' .. t .. ', not a string')
end
if tonumber(redis.call('get', KEYS[1])) == nil then
    return redis.error_reply('WRONGTYPE the latch key holds a string that is not a count')
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
    redis.call('del', KEYS[1])
    redis.call(publish, KEYS[2], ARGV[1])
    return 0
end
return left
