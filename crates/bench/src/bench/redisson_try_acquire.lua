-- What a Redisson (Java) client runs for RRateLimiter.tryAcquire(permits): the same commands in
-- the same order as RedissonRateLimiter's script (read from its source and written again here
-- for the benchmark, to measure what Redisson's own decision costs the same server). Used only
-- by latchkey-bench's `limiter` workload, on a limiter whose rate latchkey set (one layout).
--
-- KEYS[1]  the config hash: rate, interval (ms), type ("1" per client), keepAliveTime (ms)
-- KEYS[2]  {name}:value                the permits left in the window
-- KEYS[3]  {name}:value:<client id>    the same, per client
-- KEYS[4]  {name}:permits              the window's grants, a zset scored by grant time (ms)
-- KEYS[5]  {name}:permits:<client id>  the same, per client
-- ARGV[1]  permits wanted
-- ARGV[2]  the caller's clock, ms since the epoch (Redisson sends System.currentTimeMillis())
-- ARGV[3]  the grant's random bytes
--
-- Returns nil when the permits were granted, or the ms to wait before asking again.

-- Redisson reads the config one field at a time.
local rate = redis.call('hget', KEYS[1], 'rate')
local interval = redis.call('hget', KEYS[1], 'interval')
local kind = redis.call('hget', KEYS[1], 'type')
if rate == false or interval == false or kind == false then
    return redis.error_reply('RateLimiter is not initialized')
end
rate = tonumber(rate)
interval = tonumber(interval)

local value_key, log_key = KEYS[2], KEYS[4]
if kind == '1' then
    value_key, log_key = KEYS[3], KEYS[5]
end

local wanted = tonumber(ARGV[1])
if wanted > rate then
    return redis.error_reply('Requested permits amount cannot exceed defined rate')
end
local now = tonumber(ARGV[2])

-- A grant's member: the length of the random part (one byte), the random part, the permits.
local function member()
    return struct.pack('Bc0I', string.len(ARGV[3]), ARGV[3], wanted)
end

-- The permits the members of `list` hold.
local function permits_in(list)
    local total = 0
    for _, packed in ipairs(list) do
        local _, n = struct.unpack('Bc0I', packed)
        total = total + n
    end
    return total
end

local wait = nil
local left = redis.call('get', value_key)
if left == false then
    -- A fresh window: all of the rate, then this grant.
    redis.call('set', value_key, rate)
    redis.call('zadd', log_key, now, member())
    redis.call('decrby', value_key, wanted)
else
    left = tonumber(left)
    -- Grants an interval old (by the caller's clock) give their permits back.
    local horizon = now - interval
    local back = permits_in(redis.call('zrangebyscore', log_key, 0, horizon))
    if back > 0 then
        redis.call('zremrangebyscore', log_key, 0, horizon)
        if left + back > rate then
            left = rate - permits_in(redis.call('zrange', log_key, 0, -1))
        else
            left = left + back
        end
        redis.call('set', value_key, left)
    end
    if left < wanted then
        -- Refused: the oldest grant says when permits come back (Redisson adds 3 ms).
        local oldest = redis.call('zrange', log_key, 0, 0, 'withscores')
        wait = 3 + interval - (now - tonumber(oldest[2]))
    else
        redis.call('zadd', log_key, now, member())
        redis.call('decrby', value_key, wanted)
    end
end

-- The keep-alive rule, after every decision.
local keep = redis.call('hget', KEYS[1], 'keepAliveTime')
if keep ~= false and tonumber(keep) > 0 then
    redis.call('pexpire', KEYS[1], keep)
    redis.call('pexpire', value_key, keep)
    redis.call('pexpire', log_key, keep)
else
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', value_key, ttl)
        redis.call('pexpire', log_key, ttl)
    end
end
return wait
