-- Give permits back to a rate limiter's window (Redisson 4's RRateLimiter.release): whoever took
-- them, the oldest grants of the window are given back first.
--
-- KEYS     the five keys described in rate_prelude.lua
-- ARGV[1]  the permits to give back (>= 1)
--
-- The grants are taken out of the log oldest first (the last one cut down, keeping its score and
-- random part, when it holds more than is left to give back), and what was taken out goes back
-- to the counter. Unlike Redisson, permits the log does not hold (the window holds fewer than
-- asked) do not go to the counter: the invariant counter + log = rate holds. A missing counter
-- stays missing (the next acquire counts the log).
--
-- Returns {1, given_back} or {-1} when the rate was never set. A key of another type is refused
-- (WRONGTYPE) and nothing changes.
acl_check(with({'zrem', 'zadd', 'incrby'}, KEEP_ALIVE_COMMANDS))
local config = read_config()
if config == nil then
    return {-1}
end
local value_key, log_key = window_keys(config)
local counter = read_counter(value_key)
local owed = tonumber(ARGV[1])
local oldest = read('the rate limiter log', 'zset', 'zrange', log_key, 0,
    math.min(owed, 100000) - 1, 'WITHSCORES')

-- Every key has been read: the writes start here.
local given = 0
for i = 1, #oldest, 2 do
    if given >= owed then
        break
    end
    local random, permits = unpack_grant(oldest[i])
    redis.call('zrem', log_key, oldest[i])
    if permits <= owed - given then
        given = given + permits
    else
        redis.call('zadd', log_key, oldest[i + 1], pack_grant(random, permits - (owed - given)))
        given = owed
    end
end
if counter ~= nil and given > 0 then
    redis.call('incrby', value_key, given)
end
keep_alive(config, value_key, log_key)
return {1, given}
