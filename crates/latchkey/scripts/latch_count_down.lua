-- Count a count-down latch down by one (Redisson's RCountDownLatch.countDown).
-- KEYS: the count (a string holding an integer), the channel
-- (redisson_countdownlatch__channel__{<name>}). ARGV: the zero-count message ("0"), publish.
-- Returns the count left. At zero the key is deleted and the zero-count message published,
-- which opens the latch for every waiter. A latch without a count (never set, or already open)
-- is left alone and 0 returned.
local publish = publish_command(ARGV[2])
acl_check({'decr', 'del', 'get', 'type'}, publish, {KEYS[2]})
if expect_count(KEYS[1], 'the latch key') == nil then
    return 0
end
local left = redis.call('decr', KEYS[1])
if left <= 0 then
    redis.call('del', KEYS[1])
    notify(publish, KEYS[2], ARGV[1])
    return 0
end
return left
