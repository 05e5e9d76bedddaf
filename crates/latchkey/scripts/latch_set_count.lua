-- Set a count-down latch's count unless it is set already (Redisson's
-- RCountDownLatch.trySetCount).
--
-- KEYS[1]  the count: a string holding an integer (Redisson's RCountDownLatch key)
-- KEYS[2]  the channel: redisson_countdownlatch__channel__{<name>}
-- ARGV[1]  the count (>= 1)
-- ARGV[2]  Redisson's new-count message ("1")
-- ARGV[3]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns 1 when the count was set (and the new-count message published), 0 when the latch
-- already had a count.
local publish = publish_command(ARGV[3])
acl_check({'set', 'type'}, publish, {KEYS[2]})
if expect_type(KEYS[1], 'string', 'the latch key') ~= 'none' then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
notify(publish, KEYS[2], ARGV[2])
return 1
