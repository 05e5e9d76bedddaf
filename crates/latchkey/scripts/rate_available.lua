-- Count the permits a rate limiter's window has left now (Redisson's availablePermits), by the
-- server clock. Reads only: grants older than the interval are counted as back without being
-- taken out of the log (the next acquire does that).
--
-- KEYS     the five keys described in rate_prelude.lua
--
-- Returns {1, left} (`left` may be below zero when the rate was lowered under grants still in
-- the window), or {-1} when the rate was never set. A key of another type is refused
-- (WRONGTYPE).
local config = read_config()
if config == nil then
    return {-1}
end
local value_key, log_key = window_keys(config)
local counter = read_counter(value_key)
local horizon = now_ms() - config.interval
local released = sum_grants(read('the rate limiter log', 'zset', 'zrangebyscore', log_key,
    '-inf', horizon), 1)
if counter == nil or counter + released > config.rate then
    -- As acquire: count the grants of the window.
    local current = redis.call('zrangebyscore', log_key, string.format('(%d', horizon), '+inf')
    return {1, config.rate - sum_grants(current, 1)}
end
return {1, counter + released}
