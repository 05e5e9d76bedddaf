-- The read-write lock scripts' helpers, put after the prelude (src/scripts.rs): no commands run.
--
-- The lock hash (Redisson's RReadWriteLock layout): "mode" -> "read" | "write"; "<owner>" ->
-- read hold count; "<owner>:write" -> write hold count; PEXPIRE = the longest lease of any
-- hold. Read hold i of <owner> has its own lease key "<prefix>:<owner>:rwlock_timeout:<i>",
-- the lease prefix being "{<name>}" (keys of other readers can only be derived from the hash,
-- and share the lock's hash tag). latchkey's pending writers: zset "<owner>:write" -> server
-- ms after which the mark is stale.

-- The mode of the read-write lock hash `key`; a hash without one is refused.
local function rw_mode(key)
    local mode = redis.call('hget', key, 'mode')
    if mode ~= 'read' and mode ~= 'write' then
        wrong_type('the key holds a hash that is not a read-write lock')
    end
    return mode
end

-- Drops the reader fields of the lock hash `key` that have no live lease key left: crashed
-- readers. Returns the longest read lease left (ms).
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

-- An acquire's start: checks the types of the lock hash, the fencing counter and the pending
-- writers; returns the lock's mode (false when free) and the counter's last token.
local function rw_acquire_mode(key, counter, writers)
    local lock_type = expect_type(key, 'hash', 'the read-write lock key')
    local last = expect_count(counter, 'the fencing counter')
    expect_type(writers, 'zset', 'the pending writers set')
    if lock_type == 'hash' then
        return rw_mode(key), last
    end
    return false, last
end

-- Drops crashed readers of a held lock (see reap), and the lock when no hold is left; returns
-- the mode left (false when free).
local function reap_or_free(key, prefix, mode)
    if mode then
        reap(key, prefix)
        if redis.call('hlen', key) <= 1 then
            redis.call('del', key)
            return false
        end
    end
    return mode
end
