-- Read what an object name holds, for operators (`Client::inspect`): which primitive it is, by
-- its Redisson layout, and its state, in one atomic snapshot. Read-only.
--
-- KEYS[1]  the object's own key (a lock or read-write lock hash, a semaphore count)
-- KEYS[2]  the lock's fencing counter, redisson_lock_token:{name}
-- KEYS[3]  latchkey's lock wait queue (zset of waiting clients)
-- KEYS[4]  the fair lock's queue of waiting owners (list), redisson_lock_queue:{name}
-- KEYS[5]  the read-write lock's fencing counter
-- KEYS[6]  the read-write lock's pending writers (zset: "<owner>:write" -> mark ends, server ms)
-- KEYS[7]  latchkey's record of a semaphore's total permits
-- KEYS[8]  the permit semaphore's leases (zset: permit id -> lease end, server ms)
-- KEYS[9]  a scheduler group's index (zset: job name -> next action), latchkey_jobs:{name}
--
-- Returns one of
--   {'lock', holders (flat owner/count list), pttl, token or -1, waiting clients, fair queue}
--   {'rwlock', holders (flat, without `mode`), pttl, token or -1, pending writers, mode}
--   {'semaphore', available, total or -1}
--   {'permit_semaphore', available, leases (flat id/end list, the first 1000), server ms}
--   {'rate_limiter', rate, interval ms, type, keep-alive ms (0: none)}
--   {'jobs', number of jobs}
--   {'none'}
-- and refuses, as WRONGTYPE, a key of another type.
acl_check({'get', 'hgetall', 'lrange', 'pttl', 'time', 'type', 'zcard', 'zcount', 'zrange'})

local function count_of(key)
    if key_type(key) ~= 'string' then
        return -1
    end
    return tonumber(redis.call('get', key)) or -1
end

local function size_of(key)
    if key_type(key) ~= 'zset' then
        return 0
    end
    return redis.call('zcard', key)
end

local function fair_queue()
    if key_type(KEYS[4]) ~= 'list' then
        return {}
    end
    return redis.call('lrange', KEYS[4], 0, 999)
end

local found = key_type(KEYS[1])
if found == 'hash' then
    local fields = redis.call('hgetall', KEYS[1])
    local mode = nil
    local config = {}
    local holders = {}
    for i = 1, #fields, 2 do
        local field, value = fields[i], fields[i + 1]
        if field == 'mode' then
            mode = value
        else
            if field == 'rate' or field == 'interval' or field == 'type'
                or field == 'keepAliveTime' then
                config[field] = value
            end
            holders[#holders + 1] = field
            holders[#holders + 1] = value
        end
    end
    -- A rate limiter's config (Redisson's RRateLimiter) has `rate`, `interval` and `type`; a
    -- lock's fields are owner ids (`<uuid>:<n>`), a read-write lock's `mode` and owner ids.
    if config.rate and config.interval and config.type then
        local rate, interval = tonumber(config.rate), tonumber(config.interval)
        if rate == nil or interval == nil then
            wrong_type('the key holds a hash whose rate or interval is not a number: not a '
                .. 'rate limiter')
        end
        return {'rate_limiter', rate, interval, config.type,
            tonumber(config.keepAliveTime or '0') or 0}
    end
    if mode ~= nil then
        local writers = 0
        if key_type(KEYS[6]) == 'zset' then
            writers = redis.call('zcount', KEYS[6], '(' .. now_ms(), '+inf')
        end
        return {'rwlock', holders, redis.call('pttl', KEYS[1]), count_of(KEYS[5]), writers, mode}
    end
    return {'lock', holders, redis.call('pttl', KEYS[1]), count_of(KEYS[2]), size_of(KEYS[3]),
        fair_queue()}
elseif found == 'string' then
    local available = tonumber(redis.call('get', KEYS[1]))
    if available == nil then
        wrong_type('the key holds a string that is not a count: not a lock or semaphore')
    end
    if key_type(KEYS[8]) == 'zset' then
        local leases = redis.call('zrange', KEYS[8], 0, 999, 'WITHSCORES')
        return {'permit_semaphore', available, leases, now_ms()}
    end
    return {'semaphore', available, count_of(KEYS[7])}
elseif found == 'none' then
    -- A fair lock between holders: free, with owners in line.
    local queue = fair_queue()
    if #queue > 0 then
        return {'lock', {}, -2, count_of(KEYS[2]), size_of(KEYS[3]), queue}
    end
    -- A scheduler group keeps no key under its own name: its index says it is there.
    if key_type(KEYS[9]) == 'zset' then
        return {'jobs', redis.call('zcard', KEYS[9])}
    end
    return {'none'}
end
wrong_type('the key holds a ' .. found .. ': not a lock or semaphore')
