-- Set a rate limiter's rate, replacing the one set (Redisson's RRateLimiter.setRate): the window
-- starts again, empty.
--
-- KEYS     the five keys described in rate_prelude.lua
-- ARGV[1]  rate: permits per interval
-- ARGV[2]  interval, ms
-- ARGV[3]  type: "0" overall, "1" per client
-- ARGV[4]  keep-alive time, ms ("0": none)
--
-- The config is written whole. With a keep-alive time it expires after it (the acquires renew
-- it); without one it no longer expires (Redisson would keep a TTL an earlier keep-alive time
-- gave it). The window of the new type is deleted, and both windows when the type changed
-- (Redisson's setRate(RateLimiterArgs)). Other clients' per-client windows are not known here:
-- they stay until they expire or the next setRate of those clients.
--
-- Returns 1. A key of another type, or another object's hash, is refused (WRONGTYPE) and
-- nothing changes.
acl_check({'del', 'hset', 'pexpire'})
local config = read('the rate limiter config', 'hash', 'hmget', KEYS[1], 'rate', 'interval',
    'type')
refuse_foreign_hash(config[1], config[2], config[3])
local old = config[3]
expect_type(KEYS[2], 'string', 'the rate limiter counter')
expect_type(KEYS[3], 'string', 'the rate limiter counter')
expect_type(KEYS[4], 'zset', 'the rate limiter log')
expect_type(KEYS[5], 'zset', 'the rate limiter log')
-- Deleted and written again: no field or TTL of the old config is left.
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], 'rate', ARGV[1], 'interval', ARGV[2], 'type', ARGV[3],
    'keepAliveTime', ARGV[4])
if tonumber(ARGV[4]) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[4])
end
if old and old ~= ARGV[3] then
    redis.call('del', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
elseif ARGV[3] == '1' then
    redis.call('del', KEYS[3], KEYS[5])
else
    redis.call('del', KEYS[2], KEYS[4])
end
return 1
