-- Decide one request of a GCRA rate limit (generic cell rate algorithm): one key per limited
-- entity, holding its theoretical arrival time (TAT), by the server clock. Self-contained (no
-- prelude): it is the hot path of per-key limits, O(1) whatever the rate.
--
-- KEYS[1]  the entity's key: a string holding its TAT, microseconds since the Unix epoch (the
--          instant its bucket is empty again), expiring then
-- ARGV[1]  the request's cost: cells (permits), >= 1
-- ARGV[2]  the quota's period, microseconds
-- ARGV[3]  the quota's rate: cells per period (the emission interval is period / rate)
-- ARGV[4]  the quota's burst: cells that may go at once from an empty bucket
--
-- A request of `cost` cells is admitted when max(TAT, now) + cost * interval - burst * interval
-- is not after now; the TAT then moves there. A refusal writes nothing.
--
-- Returns {admitted (1/0), remaining, retry_after_us, reset_after_us}: the cells that could go
-- now after this decision, the time until this request could be admitted (0 when it was), and
-- the time until the bucket is empty again (all of `burst` available). A key of another type is
-- refused (WRONGTYPE) and nothing changes.
local time = redis.call('time')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local stored = redis.call('get', KEYS[1])
local tat = now
if stored then
    tat = tonumber(stored)
    if tat == nil then
        return redis.error_reply('WRONGTYPE the rate limit key holds a string that is not a time')
    end
    if tat < now then
        tat = now
    end
end
local cost = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local interval = period / rate
local horizon = now + burst * period / rate
local next_tat = tat + cost * period / rate
-- Times are doubles of about 2^50 us: an error of half a microsecond is rounding, not a refusal.
local late = next_tat - horizon
if late > 0.5 then
    return {0, math.floor((horizon - tat) / interval + 1e-6), math.ceil(late), math.ceil(tat - now)}
end
local ttl_ms = math.max(1, math.ceil((next_tat - now) / 1000))
redis.call('set', KEYS[1], string.format('%.17g', next_tat), 'PX', string.format('%d', ttl_ms))
return {1, math.max(0, math.floor((horizon - next_tat) / interval + 1e-6)), 0,
    math.ceil(next_tat - now)}
