-- Acquire (or re-enter) a fair lock, kept in Redisson's RedissonFairLock layout.
--
-- KEYS[1]  the lock hash: field "<client-uuid>:<handle>" -> hold count, PEXPIRE = lease
-- KEYS[2]  the fencing counter (a string holding an integer, never expires)
-- KEYS[3]  the wait queue: redisson_lock_queue:{<name>}, a list of owner ids, head first
-- KEYS[4]  the waiters' deadlines: redisson_lock_timeout:{<name>}, a zset owner id -> the
--          server time (ms) after which the entry is stale and is dropped
-- KEYS[5]  the wake channel prefix: redisson_lock__channel:{<name>}; a waiter listens on
--          "<prefix>:<owner id>"
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner id (the hash field)
-- ARGV[3]  waiter timeout in ms: a queued entry not refreshed for this long is stale
-- ARGV[4]  how long the caller parks before its next attempt at most, in ms; 0 = it will not
--          wait (do not queue it)
-- ARGV[5]  the wake message ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[6]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
-- ARGV[7]  "1" when the caller knows it holds nothing (no guard, no other attempt in flight):
--          a hold of its owner id found in Redis is then stranded (an acquire whose answer was
--          lost, an unlock that never arrived) and is taken over as a new hold (one hold, a new
--          fencing token) instead of re-entered
--
-- Returns {1, fencing_token, hold_count} when the caller holds the lock afterwards, or
-- {0, retry_after_ms, queued} when it does not: retry_after_ms is when the obstacle (the
-- holder's lease, or the head waiter's deadline) runs out at the latest (-1: no expiry), and
-- queued is 1 when the caller is in the queue.
--
-- The lock is granted only when it is free and the queue is empty or headed by the caller, so
-- waiters get it in arrival order. Every call first drops stale entries (deadline passed by the
-- server clock), so a waiter that vanished without leaving blocks the queue for at most the
-- waiter timeout. Key types are checked before the first write; a wrong type is an error and
-- nothing changes.
local publish = ARGV[6]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
local function check(key, want, what)
    local t = redis.call('type', key)['ok']
    if t ~= 'none' and t ~= want then
        return redis.error_reply('WRONGTYPE ' .. what .. ' holds a ' .. t .. ', not a ' .. want)
    end
    return t
end
local lock_type = check(KEYS[1], 'hash', 'the lock key')
if type(lock_type) == 'table' then return lock_type end
local err = check(KEYS[2], 'string', 'the fencing counter')
if type(err) == 'table' then return err end
err = check(KEYS[3], 'list', 'the wait queue')
if type(err) == 'table' then return err end
err = check(KEYS[4], 'zset', 'the waiter deadlines')
if type(err) == 'table' then return err end

local owner = ARGV[2]
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

-- Drop stale entries: first from the head (also entries without a deadline), then anywhere.
-- Returns whether the head changed.
local function purge()
    local changed = false
    while true do
        local head = redis.call('lindex', KEYS[3], 0)
        if not head then
            break
        end
        local deadline = tonumber(redis.call('zscore', KEYS[4], head))
        if deadline and deadline > now_ms then
            break
        end
        redis.call('lpop', KEYS[3])
        redis.call('zrem', KEYS[4], head)
        changed = true
    end
    local stale = redis.call('zrangebyscore', KEYS[4], '-inf', now_ms, 'LIMIT', 0, 100)
    for _, id in ipairs(stale) do
        redis.call('zrem', KEYS[4], id)
        redis.call('lrem', KEYS[3], 0, id)
    end
    return changed
end

local function leave_queue()
    redis.call('zrem', KEYS[4], owner)
    redis.call('lrem', KEYS[3], 0, owner)
end

local head_changed = purge()

if lock_type == 'hash' and redis.call('hexists', KEYS[1], owner) == 1 then
    if ARGV[7] == '1' then
        -- A stranded hold taken over: a new critical section, so a new fencing token (INCR
        -- first: it fails on a corrupt counter before anything is written).
        local token = redis.call('incr', KEYS[2])
        redis.call('hset', KEYS[1], owner, 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        leave_queue()
        return {1, token, 1}
    end
    local holds = redis.call('hincrby', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    leave_queue()
    local token = tonumber(redis.call('get', KEYS[2]) or '0') or 0
    return {1, token, holds}
end

local head = redis.call('lindex', KEYS[3], 0)
if lock_type == 'none' and (not head or head == owner) then
    -- INCR first: if the counter is not an integer it fails before anything was written.
    local token = redis.call('incr', KEYS[2])
    leave_queue()
    redis.call('hset', KEYS[1], owner, 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, token, 1}
end

if lock_type == 'none' and head_changed then
    -- The lock is free and the purge made somebody else the head: tell it.
    redis.call(publish, KEYS[5] .. ':' .. head, ARGV[5])
end

local queued = 0
local timeout = tonumber(ARGV[3])
if tonumber(ARGV[4]) > 0 then
    if redis.call('zadd', KEYS[4], now_ms + timeout, owner) == 1 then
        redis.call('lrem', KEYS[3], 0, owner)
        redis.call('rpush', KEYS[3], owner)
    else
        -- Already queued: the deadline moved on. Make sure the list has it too (LPOS needs
        -- Redis 6.0.6; older servers get a scan).
        local pos = redis.pcall('lpos', KEYS[3], owner)
        if type(pos) == 'table' and pos['err'] then
            pos = false
            for _, id in ipairs(redis.call('lrange', KEYS[3], 0, -1)) do
                if id == owner then
                    pos = true
                    break
                end
            end
        end
        if not pos then
            redis.call('rpush', KEYS[3], owner)
        end
    end
    for i = 3, 4 do
        if redis.call('pttl', KEYS[i]) < timeout then
            redis.call('pexpire', KEYS[i], timeout)
        end
    end
    queued = 1
    head = redis.call('lindex', KEYS[3], 0)
end

local retry_after
if lock_type == 'hash' then
    retry_after = redis.call('pttl', KEYS[1])
else
    -- Free, but another waiter is first: it takes the lock, or its entry goes stale.
    local deadline = tonumber(redis.call('zscore', KEYS[4], head))
    retry_after = deadline and math.max(deadline - now_ms, 0) or 0
end
return {0, retry_after, queued}
