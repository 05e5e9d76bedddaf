-- Acquire the read side of a read-write lock, kept in Redisson's RReadWriteLock layout.
--
-- KEYS[1]  the lock hash: "mode" -> "read" | "write"; "<owner>" -> read hold count;
--          "<owner>:write" -> write hold count. PEXPIRE = the longest lease of any hold.
-- KEYS[2]  the fencing counter (a string holding the last write's token, see next_token)
-- KEYS[3]  latchkey's pending writers: zset "<owner>:write" -> server ms after which the mark
--          is stale
-- KEYS[4]  the caller's read lease prefix "{<name>}:<owner>:rwlock_timeout"; read hold i of the
--          caller has its own lease key "<prefix>:<i>"
-- KEYS[5]  the lease prefix of the lock, "{<name>}": the lease keys of reader <r> are
--          "<prefix>:<r>:rwlock_timeout:<i>" (Redisson's layout; the keys of other readers can
--          only be derived from the hash, and share the lock's hash tag)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the caller's read field "<owner>" (one acquire's own owner id, or the owner id of
--          the write hold it downgrades)
-- ARGV[3]  the caller's write field "<owner>:write"
-- ARGV[4]  how long the fencing counter outlives the grant, in ms
--
-- Returns {1, token} when granted (now, or by an earlier sending of the same attempt, whose
-- answer was lost): token is the last write's token (a read does not advance the counter; a
-- counter that expired is started again from the server clock, see next_token); or
-- {0, retry_after_ms} when not (-1: no expiry).
--
-- Policy (writer preference): a new reader waits while a live writer is pending (registered
-- in KEYS[3] by its attempts) even if the lock is in read mode, so writers do not starve
-- under a steady stream of readers. A read by the holder of the write lock (a downgrade)
-- never waits.
--
-- Reader fields whose every lease key has expired (crashed readers) are dropped first, so
-- a crashed reader never pins the lock longer than its own lease.
acl_check({'del', 'get', 'hdel', 'hexists', 'hget', 'hgetall', 'hlen', 'hset', 'pexpire', 'pttl',
    'set', 'time', 'type', 'zcard', 'zrange', 'zremrangebyscore'})
local lock_type = expect_type(KEYS[1], 'hash', 'the read-write lock key')
local last = expect_count(KEYS[2], 'the fencing counter')
expect_type(KEYS[3], 'zset', 'the pending writers set')
local mode = false
if lock_type == 'hash' then
    mode = rw_mode(KEYS[1])
end
local owner = ARGV[2]
expect_type(KEYS[4] .. ':1', 'string', 'the read lease key')

local now = now_ms()

if mode then
    reap(KEYS[1], KEYS[5])
    if redis.call('hlen', KEYS[1]) <= 1 then
        redis.call('del', KEYS[1])
        mode = false
    end
end

-- A counter gone (its lock idle) is started again from the server clock.
local token = last or now_us()
if mode and redis.call('hexists', KEYS[1], owner) == 1 then
    -- Granted to this owner by an earlier sending of this attempt.
    return {1, token}
end
local downgrade = mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1
local writer_pending = false
if not downgrade then
    redis.call('zremrangebyscore', KEYS[3], '-inf', now)
    writer_pending = redis.call('zcard', KEYS[3]) > 0
end

if downgrade or (mode ~= 'write' and not writer_pending) then
    -- The counter lives on with the lock.
    redis.call('set', KEYS[2], string.format('%d', token), 'PX',
        string.format('%d', ARGV[1] + ARGV[4]))
    if not mode then
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    redis.call('hset', KEYS[1], owner, 1)
    redis.call('set', KEYS[4] .. ':1', 1, 'PX', ARGV[1])
    local ttl = redis.call('pttl', KEYS[1])
    if ttl < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return {1, token}
end

local retry_after = -1
if mode then
    retry_after = redis.call('pttl', KEYS[1])
end
if writer_pending then
    -- Blocked by a pending writer: it takes the lock, leaves (and says so), or goes stale.
    local first = redis.call('zrange', KEYS[3], 0, 0, 'WITHSCORES')
    local stale_in = math.max(tonumber(first[2]) - now, 0)
    if retry_after < 0 or stale_in < retry_after then
        retry_after = stale_in
    end
end
return {0, retry_after}
