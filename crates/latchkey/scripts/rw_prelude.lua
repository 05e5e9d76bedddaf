-- The read-write lock scripts' helpers, put after the prelude (src/scripts.rs): no commands run.

-- The mode of the read-write lock hash `key`, "read" or "write"; a hash without one is not a
-- read-write lock and is refused.
local function rw_mode(key)
    local mode = redis.call('hget', key, 'mode')
    if mode ~= 'read' and mode ~= 'write' then
        wrong_type('the key holds a hash that is not a read-write lock')
    end
    return mode
end

-- Drops the reader fields of the lock hash `key` that have no live lease key left (Redisson's
-- "<prefix>:<reader>:rwlock_timeout:<i>"): crashed readers. Returns the longest read lease left
-- (ms).
local function reap(key, prefix)
    local longest = 0
    local fields = redis.call('hgetall', key)
    for i = 1, #fields, 2 do
        local field, count = fields[i], tonumber(fields[i + 1])
        if field ~= 'mode' and count and string.sub(field, -6) ~= ':write' then
            local live = false
            for n = 1, count do
                local ttl = redis.call('pttl', prefix .. ':' .. field .. ':rwlock_timeout:' .. n)
                if ttl ~= -2 then
                    live = true
                    longest = math.max(longest, ttl)
                end
            end
            if not live then
                redis.call('hdel', key, field)
            end
        end
    end
    return longest
end
