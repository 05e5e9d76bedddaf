-- The permit-expirable semaphore scripts' helpers, put after the prelude (src/scripts.rs): no
-- commands run.

-- A permit id given as 32 hex digits, as the 16 raw bytes Redisson keeps.
local function unhex(h)
    return (h:gsub('..', function(cc) return string.char(tonumber(cc, 16)) end))
end

-- Drops the leases of `leases` (a zset: permit id -> lease end, ms) that ended by `now`, at most
-- 1000 per call so that a call stays short. Returns how many it dropped.
local function drop_ended(leases, now)
    local ended = redis.call('zrangebyscore', leases, '-inf', now, 'LIMIT', 0, 1000)
    for i = 1, #ended, 100 do
        redis.call('zrem', leases, unpack(ended, i, math.min(i + 99, #ended)))
    end
    return #ended
end

-- Reclaims the ended leases: their permits go back to the count `permits`, and the new count, if
-- above zero, is published on `channel` with `publish`. Returns the count available afterwards
-- (`available` when no lease had ended).
local function reclaim(permits, leases, channel, publish, now, available)
    local ended = drop_ended(leases, now)
    if ended == 0 then
        return available
    end
    available = redis.call('incrby', permits, ended)
    if available > 0 then
        notify(publish, channel, available)
    end
    return available
end
