-- Acquire the write side of a read-write lock (Redisson RReadWriteLock layout).
--
-- KEYS[1]  the lock hash: "mode" -> "read" | "write"; "<owner>" -> read hold count;
--          "<owner>:write" -> write hold count. PEXPIRE = the longest lease of any hold.
-- KEYS[2]  the fencing counter (a string holding the last write's token, see next_token)
-- KEYS[3]  latchkey's pending writers: zset "<owner>:write" -> server ms after which the mark
--          is stale
-- KEYS[4]  the lease prefix of the lock, "{<name>}": the lease keys of reader <r> are
--          "<prefix>:<r>:rwlock_timeout:<i>" (Redisson's layout)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the caller's write field "<owner>:write" (one acquire's own owner id)
-- ARGV[3]  how long the caller parks before its next attempt at most, in ms; 0 = it will not
--          wait (do not mark it pending)
-- ARGV[4]  how long the fencing counter outlives the grant, in ms
--
-- Returns {1, fencing_token} when granted (now, with a new token; or by an earlier sending of
-- the same attempt, whose answer was lost), or {0, retry_after_ms} when not (-1: no expiry).
--
-- A caller that will wait is marked pending until shortly after its next attempt is due
-- (ARGV[3] + 2 s), which makes new readers wait (writer preference); every attempt moves the
-- mark on, a grant removes it, and a mark not moved on goes stale by itself.
acl_check({'del', 'get', 'hdel', 'hexists', 'hget', 'hgetall', 'hlen', 'hset', 'pexpire', 'pttl',
    'set', 'time', 'type', 'zadd', 'zrem'})
local lock_type = expect_type(KEYS[1], 'hash', 'the read-write lock key')
expect_count(KEYS[2], 'the fencing counter')
expect_type(KEYS[3], 'zset', 'the pending writers set')
local mode = false
if lock_type == 'hash' then
    mode = rw_mode(KEYS[1])
end
local field = ARGV[2]

local now = now_ms()

if mode then
    reap(KEYS[1], KEYS[4])
    if redis.call('hlen', KEYS[1]) <= 1 then
        redis.call('del', KEYS[1])
        mode = false
    end
end

if mode == 'write' and redis.call('hexists', KEYS[1], field) == 1 then
    -- Granted to this owner by an earlier sending of this attempt.
    return {1, tonumber(redis.call('get', KEYS[2])) or 0}
end
if not mode then
    local token = next_token(KEYS[2], ARGV[1] + ARGV[4])
    redis.call('hset', KEYS[1], 'mode', 'write', field, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('zrem', KEYS[3], field)
    return {1, token}
end

local park = tonumber(ARGV[3])
if park > 0 then
    local alive = park + 2000
    redis.call('zadd', KEYS[3], now + alive, field)
    if redis.call('pttl', KEYS[3]) < alive then
        redis.call('pexpire', KEYS[3], alive)
    end
end
return {0, redis.call('pttl', KEYS[1])}
