-- Acquire the write side of a read-write lock (layout: rw_prelude.lua).
-- KEYS: lock hash, fencing counter, pending writers, the lock's lease prefix.
-- ARGV: lease ms, the caller's write field "<owner>:write" (one acquire's own owner id), park
-- ms (0: it will not wait, do not mark it pending), how long the counter outlives the grant.
-- Returns {1, token} when granted (now, with a new token; or by an earlier sending of the same
-- attempt, whose answer was lost), or {0, retry_after_ms} (-1: no expiry). A caller that will
-- wait is marked pending until shortly after its next attempt is due (park + 2 s), which makes
-- new readers wait (writer preference); every attempt moves the mark on, a grant removes it,
-- and a mark not moved on goes stale by itself.
acl_check({'del', 'get', 'hdel', 'hexists', 'hget', 'hgetall', 'hlen', 'hset', 'pexpire', 'pttl',
    'set', 'time', 'type', 'zadd', 'zrem'})
local mode = rw_acquire_mode(KEYS[1], KEYS[2], KEYS[3])
local field = ARGV[2]
local now = now_ms()
mode = reap_or_free(KEYS[1], KEYS[4], mode)
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
