-- Acquire (or re-enter) the write side of a read-write lock (Redisson RReadWriteLock layout).
--
-- KEYS[1]  the lock hash: "mode" -> "read" | "write"; "<owner>" -> read hold count;
--          "<owner>:write" -> write hold count. PEXPIRE = the longest lease of any hold.
-- KEYS[2]  the fencing counter (a string holding an integer, never expires)
-- KEYS[3]  latchkey's pending writers: zset "<owner>:write" -> server ms after which the mark
--          is stale
-- KEYS[4]  the lease prefix of the lock, "{<name>}": the lease keys of reader <r> are
--          "<prefix>:<r>:rwlock_timeout:<i>" (Redisson's layout)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the caller's write field "<owner>:write"
-- ARGV[3]  the caller's read field "<owner>"
-- ARGV[4]  how long the caller parks before its next attempt at most, in ms; 0 = it will not
--          wait (do not mark it pending)
-- ARGV[5]  "1" when the caller knows it holds no write hold and has no other write attempt
--          under way: a write hold of its field found in Redis is then stranded (an acquire
--          whose answer was lost, an unlock that never arrived) and is dropped, as its release
--          would have done, before this attempt; re-entering it would keep the old fencing
--          token, and the caller's unlocks would never free the lock
--
-- Returns {1, fencing_token, write_holds} when granted (a new write hold advances the
-- counter), {0, retry_after_ms} when not (-1: no expiry), or {-1} when the caller holds a
-- read hold and no write hold: upgrading is refused (two upgraders would deadlock), and
-- nothing changes.
--
-- A caller that will wait is marked pending until shortly after its next attempt is due
-- (ARGV[4] + 2 s), which makes new readers wait (writer preference); every attempt moves the
-- mark on, a grant removes it, and a mark not moved on goes stale by itself.
acl_check({'del', 'get', 'hdel', 'hexists', 'hget', 'hgetall', 'hincrby', 'hlen', 'hset', 'incr',
    'pexpire', 'pttl', 'time', 'type', 'zadd', 'zrem'})
local lock_type = expect_type(KEYS[1], 'hash', 'the read-write lock key')
expect_type(KEYS[2], 'string', 'the fencing counter')
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

if mode == 'write' and ARGV[5] == '1' and redis.call('hexists', KEYS[1], field) == 1 then
    redis.call('hdel', KEYS[1], field)
    if redis.call('hlen', KEYS[1]) <= 1 then
        redis.call('del', KEYS[1])
        mode = false
    else
        -- The owner keeps read holds (it had downgraded): the lock stays theirs, for reading.
        redis.call('hset', KEYS[1], 'mode', 'read')
        mode = 'read'
    end
end

if mode == 'write' and redis.call('hexists', KEYS[1], field) == 1 then
    local holds = redis.call('hincrby', KEYS[1], field, 1)
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    redis.call('zrem', KEYS[3], field)
    local token = tonumber(redis.call('get', KEYS[2]) or '0') or 0
    return {1, token, holds}
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
    return {-1}
end
if not mode then
    -- INCR first: if the counter is not an integer it fails before anything was written.
    local token = redis.call('incr', KEYS[2])
    redis.call('hset', KEYS[1], 'mode', 'write', field, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('zrem', KEYS[3], field)
    return {1, token, 1}
end

local park = tonumber(ARGV[4])
if park > 0 then
    local alive = park + 2000
    redis.call('zadd', KEYS[3], now + alive, field)
    if redis.call('pttl', KEYS[3]) < alive then
        redis.call('pexpire', KEYS[3], alive)
    end
end
return {0, redis.call('pttl', KEYS[1])}
