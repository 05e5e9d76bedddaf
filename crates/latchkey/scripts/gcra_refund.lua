-- Give back the cells of a GCRA decision whose caller went away before it learnt of it (a
-- dropped future): the entity's TAT moves back by their emission time, never before now.
-- Self-contained (no prelude), like gcra_check.lua.
--
-- KEYS[1]  the entity's key (see gcra_check.lua)
-- ARGV[1]  the cells to give back
-- ARGV[2]  the quota's period, microseconds
-- ARGV[3]  the quota's rate: cells per period
--
-- Returns 1 when the TAT moved back, 0 when the bucket was empty already. A key of another type is
-- refused (WRONGTYPE) and nothing changes.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local stored = redis.call('get', KEYS[1])
if not stored then
    return 0
end
local tat = tonumber(stored)
if tat == nil then
    return redis.error_reply('WRONGTYPE the rate limit key holds a string that is not a time')
end
if tat <= now then
    return 0
end
local back = tat - tonumber(ARGV[1]) * tonumber(ARGV[2]) / tonumber(ARGV[3])
if back <= now then
    redis.call('del', KEYS[1])
    return 1
end
local ttl_ms = math.max(1, math.ceil((back - now) / 1000))
redis.call('set', KEYS[1], string.format('%.17g', back), 'PX', string.format('%d', ttl_ms))
return 1
