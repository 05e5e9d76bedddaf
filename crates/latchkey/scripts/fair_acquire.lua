-- Acquire a fair lock, kept in Redisson's RedissonFairLock layout.
--
-- KEYS: lock hash (field: owner id -> hold count; PEXPIRE = lease), fencing counter, wait
-- queue (redisson_lock_queue:{<name>}), deadlines (redisson_lock_timeout:{<name>}), wake
-- channel prefix (redisson_lock__channel:{<name>}; a waiter listens on "<prefix>:<owner id>").
-- ARGV: lease ms, owner id, thread wait time W ms (Redisson's threadWaitTime), park ms (0: it
-- will not wait, do not queue it), wake message ("0"), publish, how long the fencing counter
-- outlives the grant (ms).
--
-- Returns {1, token} when the caller holds the lock afterwards (granted now, or by an earlier
-- sending of the same attempt, whose answer was lost), or {0, retry_after_ms, queued}:
-- retry_after_ms is when the obstacle (the holder's lease, or the head waiter's deadline) runs
-- out at the latest (-1: no expiry), queued is 1 when the caller is in the queue.
--
-- The lock is granted only when it is free and the queue is empty or headed by the caller, so
-- waiters get it in arrival order. Stale entries are dropped first.
--
-- Deadlines follow Redisson's chain, so that Redisson (Java) waiters can share the queue:
-- * a new entry's deadline is the tail's deadline + W (the lock's expiry + W when the queue is
--   empty): it may take the lock up to W after the waiter ahead of it could at the latest;
-- * whoever is served (or leaves) takes its link out of the chain: the deadline of every entry
--   behind it goes down by W. Redisson's scripts do the same, so the chain stays W apart;
-- * a latchkey waiter also keeps its own deadline at least at now + the lock's remaining lease +
--   (its place + 1) x W, refreshed at every attempt: what the chain would give it if everyone
--   ahead had queued just now. It only ever raises its own deadline, and then raises the
--   entries behind it as far as needed to keep them W apart, so the chain stays intact; a live
--   latchkey waiter never goes stale however long the holders keep the lock, and a vanished
--   one is dropped about W (+ the lease the lock had left) after its turn came.
local publish = publish_command(ARGV[6])
acl_check({'get', 'hexists', 'hset', 'lindex', 'lpop', 'lrange', 'lrem', 'pexpire', 'pttl',
    'rpush', 'set', 'time', 'type', 'zadd', 'zincrby', 'zrange', 'zrangebyscore', 'zrem',
    'zscore'}, publish)
if not tonumber(ARGV[3]) or tonumber(ARGV[3]) <= 0 then
    return redis.error_reply('ERR the thread wait time must be a positive number of ms')
end
local lock_type = expect_type(KEYS[1], 'hash', 'the lock key')
expect_count(KEYS[2], 'the fencing counter')
expect_type(KEYS[3], 'list', 'the wait queue')
expect_type(KEYS[4], 'zset', 'the waiter deadlines')
local owner = ARGV[2]
local wait = tonumber(ARGV[3])
local now = now_ms()
-- Drop stale entries: from the head (also entries without a deadline), then anywhere.
local _, dropped = live_head(KEYS[3], KEYS[4], now)
for _, id in ipairs(redis.call('zrangebyscore', KEYS[4], '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('zrem', KEYS[4], id)
    redis.call('lrem', KEYS[3], 0, id)
end
if lock_type == 'hash' and redis.call('hexists', KEYS[1], owner) == 1 then
    -- Granted to this owner by an earlier sending of this attempt (which left the queue).
    return {1, tonumber(redis.call('get', KEYS[2])) or 0}
end
local head = redis.call('lindex', KEYS[3], 0)
if lock_type == 'none' and (not head or head == owner) then
    local token = next_token(KEYS[2], ARGV[1] + ARGV[7])
    unlink(KEYS[3], KEYS[4], owner, wait)
    redis.call('hset', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, token}
end
if lock_type == 'none' and dropped > 0 then
    -- The lock is free and the purge made somebody else the head: tell it.
    notify(publish, KEYS[5] .. ':' .. head, ARGV[5])
end
-- The lock's remaining lease in ms (-1: no expiry, -2: free); nothing below changes it.
local pttl = redis.call('pttl', KEYS[1])
local queued = 0
if tonumber(ARGV[4]) > 0 then
    -- The lease left, 0 when the lock is free or never expires.
    local lease_left = math.max(pttl, 0)
    local ids = redis.call('lrange', KEYS[3], 0, -1)
    local place
    for i, id in ipairs(ids) do
        if id == owner then
            place = i - 1
            break
        end
    end
    local deadline = tonumber(redis.call('zscore', KEYS[4], owner))
    if not place then
        -- Joins at the back, chained from the tail as Redisson chains its own waiters.
        local tail = ids[#ids]
        local tail_deadline = tail and tonumber(redis.call('zscore', KEYS[4], tail))
        local chained = (tail_deadline or now + lease_left) + wait
        deadline = math.max(deadline or chained, chained)
        place = #ids
        redis.call('rpush', KEYS[3], owner)
    end
    -- Never lower than what the chain would give this place now (see the top).
    local floor = now + lease_left + (place + 1) * wait
    deadline = math.max(deadline or floor, floor)
    redis.call('zadd', KEYS[4], deadline, owner)
    -- A raised deadline must not catch up with the entries behind: they stay W apart.
    local prev = deadline
    for i = place + 2, #ids do
        local d = tonumber(redis.call('zscore', KEYS[4], ids[i]))
        if not d or d >= prev + wait then
            break
        end
        prev = prev + wait
        redis.call('zadd', KEYS[4], prev, ids[i])
    end
    for _, i in ipairs({3, 4}) do
        if redis.call('pttl', KEYS[i]) < wait then
            redis.call('pexpire', KEYS[i], wait)
        end
    end
    queued = 1
    -- Stale entries were dropped before: the head is the first of the queue, or the caller.
    head = ids[1] or owner
end
local retry_after
if lock_type == 'hash' then
    retry_after = pttl
else
    -- Free, but another waiter is first: it takes the lock, or its entry goes stale.
    local deadline = tonumber(redis.call('zscore', KEYS[4], head))
    retry_after = deadline and math.max(deadline - now, 0) or 0
end
return {0, retry_after, queued}
