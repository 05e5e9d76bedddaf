-- Give back one grant of a rate limiter, identified by its log member: the grant of an acquire
-- whose caller went away before it learnt of it (a dropped future).
--
-- KEYS     the five keys described in rate_prelude.lua
-- ARGV[1]  the grant's permits
-- ARGV[2]  the grant's random part
--
-- The grant leaves the log and its permits go back to the counter, exactly: if it is no longer
-- in the log (it came back with time, the window was reset, the type changed), nothing is done.
--
-- Returns 1 when the grant was given back, 0 when it was no longer in the window. A key of
-- another type is refused (WRONGTYPE) and nothing changes.
acl_check({'zrem', 'incrby'})
local config = read_config()
if config == nil then
    return 0
end
local value_key, log_key = window_keys(config)
local counter = read_counter(value_key)
local member = pack_grant(ARGV[2], tonumber(ARGV[1]))
if not read('the rate limiter log', 'zset', 'zscore', log_key, member) then
    return 0
end
redis.call('zrem', log_key, member)
if counter ~= nil then
    redis.call('incrby', value_key, ARGV[1])
end
return 1
