-- Set a count-down latch's count unless it is set already (RCountDownLatch.trySetCount).
-- KEYS: as latch_count_down.lua. ARGV: the count (>= 1), the new-count message ("1"), publish.
-- Returns 1 when the count was set (and the message published), 0 when it already had one.
local publish = publish_command(ARGV[3])
acl_check({'set', 'type'}, publish, {KEYS[2]})
if expect_type(KEYS[1], 'string', 'the latch key') ~= 'none' then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
notify(publish, KEYS[2], ARGV[2])
return 1
