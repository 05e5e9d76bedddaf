-- Acquire the read side of a read-write lock (layout: rw_prelude.lua).
--
-- KEYS: lock hash, fencing counter (the last write's token, see next_token), pending writers,
-- the caller's read lease prefix "{<name>}:<owner>:rwlock_timeout", the lock's lease prefix.
-- ARGV: lease ms, the caller's read field "<owner>" (one acquire's own owner id, or the owner id
-- of the write hold it downgrades), its write field "<owner>:write", how long the fencing
-- counter outlives the grant (ms).
--
-- Returns {1, token} when granted (now, or by an earlier sending of the same attempt, whose
-- answer was lost): token is the last write's (a read does not advance the counter; one that
-- expired is started again from the server clock); or {0, retry_after_ms} (-1: no expiry).
--
-- Policy (writer preference): a new reader waits while a live writer is pending even if the
-- lock is in read mode, so writers do not starve under a steady stream of readers. A read by
-- the holder of the write lock (a downgrade) never waits. Crashed readers are dropped first, so
-- a crashed reader never pins the lock longer than its own lease.
acl_check({'del', 'get', 'hdel', 'hexists', 'hget', 'hgetall', 'hlen', 'hset', 'pexpire', 'pttl',
    'set', 'time', 'type', 'zcard', 'zrange', 'zremrangebyscore'})
local mode, last = rw_acquire_mode(KEYS[1], KEYS[2], KEYS[3])
local owner = ARGV[2]
expect_type(KEYS[4] .. ':1', 'string', 'the read lease key')
local now = now_ms()
mode = reap_or_free(KEYS[1], KEYS[5], mode)
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
local retry_after = mode and redis.call('pttl', KEYS[1]) or -1
if writer_pending then
    -- Blocked by a pending writer: it takes the lock, leaves (and says so), or goes stale.
    local first = redis.call('zrange', KEYS[3], 0, 0, 'WITHSCORES')
    local stale_in = math.max(tonumber(first[2]) - now, 0)
    if retry_after < 0 or stale_in < retry_after then
        retry_after = stale_in
    end
end
return {0, retry_after}
