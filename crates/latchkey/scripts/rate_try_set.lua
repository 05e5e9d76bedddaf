-- Set a rate limiter's rate unless it is set already (Redisson's RRateLimiter.trySetRate).
--
-- KEYS[1]  the config hash (see rate_prelude.lua)
-- ARGV[1]  rate: permits per interval
-- ARGV[2]  interval, ms
-- ARGV[3]  type: "0" overall, "1" per client
-- ARGV[4]  keep-alive time, ms ("0": none)
--
-- As Redisson: each field missing from the config is written (HSETNX each), and the answer is
-- whether `type` was missing, that is whether this call set the rate up; then, with a keep-alive
-- time, the config expires after it (the acquires renew it). The window's keys are not touched.
--
-- Returns 1 when this call set the rate, 0 when it was set already. A config key of another type,
-- or another object's hash, is refused (WRONGTYPE) and nothing changes.
acl_check({'hset', 'pexpire'})
local names = {'rate', 'interval', 'type', 'keepAliveTime'}
local fields = read('the rate limiter config', 'hash', 'hmget', KEYS[1], unpack(names))
refuse_foreign_hash(fields[1], fields[2], fields[3])
local missing = {}
for i, name in ipairs(names) do
    if not fields[i] then
        missing[#missing + 1] = name
        missing[#missing + 1] = ARGV[i]
    end
end
if #missing > 0 then
    redis.call('hset', KEYS[1], unpack(missing))
end
if fields[3] then
    return 0
end
if tonumber(ARGV[4]) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[4])
end
return 1
