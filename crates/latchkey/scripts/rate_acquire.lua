-- Take permits from a rate limiter kept in Redisson's RRateLimiter layout (its tryAcquire), the
-- grant stamped with the server's clock (Redisson clients stamp theirs with their own).
--
-- KEYS     the five keys described in rate_prelude.lua
-- ARGV[1]  the permits to take (>= 1)
-- ARGV[2]  the grant's random part (16 bytes), which makes its log member unique
--
-- Returns {1, left} when the permits were taken (`left`: permits left in the window), {0,
-- wait_ms, left} when the window has too few (`wait_ms`: when enough come back, by the server
-- clock, unless somebody releases some first), {-1} when the rate was never set, {-2, rate}
-- when more permits were asked for than the rate (they could never be granted). The last two
-- change nothing, nor does a key of another type (WRONGTYPE).
--
-- On top of Redisson's rules, the counter is counted again from the log when it is missing, when
-- it says more than the rate, or when it says less than the log explains (a key lost apart from
-- the other): the invariant counter + log = rate holds again after the call.
acl_check(with({'zremrangebyscore', 'zrange', 'set', 'zadd', 'decrby'}, KEEP_ALIVE_COMMANDS))
local config = read_config()
if config == nil then
    return {-1}
end
local want = tonumber(ARGV[1])
if want > config.rate then
    return {-2, config.rate}
end
local value_key, log_key = window_keys(config)
local counter = read_counter(value_key)
local now = now_ms()
local horizon = now - config.interval
-- A grant scored `horizon` or earlier is at least one interval old: its permits are back.
local expired = read('the rate limiter log', 'zset', 'zrangebyscore', log_key, '-inf', horizon)

-- Every key has been read: the writes start here.
local released = sum_grants(expired, 1)
if #expired > 0 then
    redis.call('zremrangebyscore', log_key, '-inf', horizon)
end
local left
if counter == nil or counter + released > config.rate then
    left = config.rate - sum_grants(redis.call('zrange', log_key, 0, -1), 1)
else
    left = counter + released
end
if left ~= counter then
    redis.call('set', value_key, left)
end

local function grant()
    redis.call('zadd', log_key, now, pack_grant(ARGV[2], want))
    local after = redis.call('decrby', value_key, want)
    keep_alive(config, value_key, log_key)
    return {1, after}
end

-- When `need` more permits come back: the score of the grant, oldest first, that brings the
-- permits back to `need` (at most 1000 grants are read, so a call stays short: each holds one
-- permit or more). Returns that score (or the last one read, nil if none), whether the grants
-- read hold `need`, whether they are the whole log, and the permits they hold.
local function when_back(need)
    local limit = math.min(need, 1000)
    local oldest = redis.call('zrange', log_key, 0, limit - 1, 'WITHSCORES')
    local back, at = 0, nil
    for i = 1, #oldest, 2 do
        local _, permits = unpack_grant(oldest[i])
        back = back + permits
        at = tonumber(oldest[i + 1])
        if back >= need then
            return at, true, false, back
        end
    end
    return at, false, #oldest < 2 * limit, back
end

if left >= want then
    return grant()
end
local at, enough, whole, logged = when_back(want - left)
if not enough and whole then
    -- The log holds fewer permits than the counter misses: the counter lost some.
    left = config.rate - logged
    redis.call('set', value_key, left)
    if left >= want then
        return grant()
    end
    at = when_back(want - left)
end
keep_alive(config, value_key, log_key)
return {0, math.max(1, (at or now) + config.interval - now), left}
