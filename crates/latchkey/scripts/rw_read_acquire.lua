-- Acquire (or re-enter) the read side of a read-write lock, kept in Redisson's
-- RReadWriteLock layout.
--
-- KEYS[1]  the lock hash: "mode" -> "read" | "write"; "<owner>" -> read hold count;
--          "<owner>:write" -> write hold count. PEXPIRE = the longest lease of any hold.
-- KEYS[2]  the fencing counter (a string holding an integer, never expires)
-- KEYS[3]  latchkey's pending writers: zset "<owner>:write" -> server ms after which the mark
--          is stale
-- KEYS[4]  the caller's read lease prefix "{<name>}:<owner>:rwlock_timeout"; read hold i of the
--          caller has its own lease key "<prefix>:<i>"
-- KEYS[5]  the lease prefix of the lock, "{<name>}": the lease keys of reader <r> are
--          "<prefix>:<r>:rwlock_timeout:<i>" (Redisson's layout; the keys of other readers can
--          only be derived from the hash, and share the lock's hash tag)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the caller's read field "<owner>"
-- ARGV[3]  the caller's write field "<owner>:write"
-- ARGV[4]  "1" when the caller knows it holds no read hold and has no other read attempt under
--          way: read holds of its owner id found in Redis are then stranded (an acquire whose
--          answer was lost, an unlock that never arrived) and are dropped with their lease keys,
--          as their releases would have done, before this attempt; re-entering them would let
--          this reader pass pending writers forever, and its unlocks would never free the lock
--
-- Returns {1, token, read_holds} when granted: token is the fencing counter's current value
-- (a read does not advance it); or {0, retry_after_ms} when not (-1: no expiry).
--
-- Policy (writer preference): a new reader waits while a live writer is pending (registered
-- in KEYS[3] by its attempts) even if the lock is in read mode, so writers do not starve
-- under a steady stream of readers. Re-entering a read hold, and a read by the holder of the
-- write lock (downgrade), never wait.
--
-- Reader fields whose every lease key has expired (crashed readers) are dropped first, so
-- a crashed reader never pins the lock longer than its own lease.
acl_check({'del', 'get', 'hdel', 'hexists', 'hget', 'hgetall', 'hincrby', 'hlen', 'hset',
    'pexpire', 'pttl', 'set', 'time', 'type', 'zcard', 'zrange', 'zremrangebyscore'})
local lock_type = expect_type(KEYS[1], 'hash', 'the read-write lock key')
expect_type(KEYS[2], 'string', 'the fencing counter')
expect_type(KEYS[3], 'zset', 'the pending writers set')
local mode = false
if lock_type == 'hash' then
    mode = rw_mode(KEYS[1])
end
local owner = ARGV[2]
local ind = (tonumber(redis.call('hget', KEYS[1], owner)) or 0) + 1
-- The lease key this hold will use (index 1 if the caller's earlier holds turn out expired).
for _, i in ipairs({ind, 1}) do
    expect_type(KEYS[4] .. ':' .. i, 'string', 'the read lease key')
end

local now = now_ms()

if mode then
    reap(KEYS[1], KEYS[5])
    if redis.call('hlen', KEYS[1]) <= 1 then
        redis.call('del', KEYS[1])
        mode = false
    end
end

if mode and ARGV[4] == '1' then
    local stranded = tonumber(redis.call('hget', KEYS[1], owner))
    if stranded then
        for i = 1, stranded do
            redis.call('del', KEYS[4] .. ':' .. i)
        end
        redis.call('hdel', KEYS[1], owner)
        if redis.call('hlen', KEYS[1]) <= 1 then
            redis.call('del', KEYS[1])
            mode = false
        end
    end
end

local reentry = mode and redis.call('hexists', KEYS[1], owner) == 1
local downgrade = mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1
local writer_pending = false
if not reentry and not downgrade then
    redis.call('zremrangebyscore', KEYS[3], '-inf', now)
    writer_pending = redis.call('zcard', KEYS[3]) > 0
end

if reentry or downgrade or (mode ~= 'write' and not writer_pending) then
    local token = tonumber(redis.call('get', KEYS[2]) or '0') or 0
    if not mode then
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    local holds = redis.call('hincrby', KEYS[1], owner, 1)
    redis.call('set', KEYS[4] .. ':' .. holds, 1, 'PX', ARGV[1])
    local ttl = redis.call('pttl', KEYS[1])
    if ttl < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return {1, token, holds}
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
