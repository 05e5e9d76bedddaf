-- The permit-expirable semaphore scripts' helpers, put after the prelude (src/scripts.rs): no
-- commands run. Redisson's RPermitExpirableSemaphore layout, the KEYS of every script: the
-- available permits (a string holding an integer), the leases (`{<name>}:timeout`, a zset of
-- permit id, 16 raw bytes -> lease end), the wake-up channel (redisson_sc:{<name>}).

-- A permit id given as 32 hex digits, as the 16 raw bytes Redisson keeps.
local function unhex(h)
    return (h:gsub('..', function(cc) return string.char(tonumber(cc, 16)) end))
end

-- Drops the leases that ended by `now`, at most 1000 per call so that a call stays short.
-- Returns how many it dropped.
local function drop_ended(leases, now)
    local ended = redis.call('zrangebyscore', leases, '-inf', now, 'LIMIT', 0, 1000)
    for i = 1, #ended, 100 do
        redis.call('zrem', leases, unpack(ended, i, math.min(i + 99, #ended)))
    end
    return #ended
end

-- Reclaims the ended leases: their permits go back to the count, and the new count, if above
-- zero, is published. Returns the count available afterwards (`available` when none ended).
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

-- The start of a script that counts the permits: the available count after reclaiming.
local function counted(publish)
    acl_check({'get', 'incrby', 'time', 'type', 'zcard', 'zrangebyscore',
        'zrem'}, publish, {KEYS[3]})
    local available = expect_count(KEYS[1], 'the semaphore key') or 0
    expect_type(KEYS[2], 'zset', 'the permit leases')
    return reclaim(KEYS[1], KEYS[2], KEYS[3], publish, now_ms(), available)
end
