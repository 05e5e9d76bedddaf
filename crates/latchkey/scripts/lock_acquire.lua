-- Acquire (or re-enter) a reentrant lock kept as a Redisson RLock hash.
--
-- KEYS[1]  the lock hash: field "<client-uuid>:<handle>" -> hold count, PEXPIRE = lease
-- KEYS[2]  the fencing counter (a string holding an integer, never expires)
-- KEYS[3]  latchkey's wait queue: zset of client wake ids scored by arrival (server ms)
-- KEYS[4]  latchkey's waiter liveness: hash of wake id -> registered until (server ms)
-- KEYS[5]  the hand-off reservation: a string holding the wake id the lock is reserved for
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field
-- ARGV[3]  the caller's client wake id (a decimal number >= 2)
-- ARGV[4]  how long the caller will wait before its next attempt at most, in ms; 0 = it will
--          not wait (do not register it as a waiter)
-- ARGV[5]  "1" when other waiters of the caller's client still wait for this lock (keep the
--          client registered after a grant), "0" otherwise
-- ARGV[6]  "1" when the caller knows it holds nothing (no guard, no other attempt in flight):
--          a hold of its owner field found in Redis is then stranded (an acquire whose answer
--          was lost, an unlock that never arrived) and is reset to one hold instead of re-entered
--
-- Returns {1, fencing_token, hold_count} when the caller holds the lock afterwards,
-- or {0, retry_after_ms} when it does not (-1: the holder's lock has no expiry).
-- Key types are checked before the first write; a wrong type is an error and nothing changes.
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
local queue_type = check(KEYS[3], 'zset', 'the wait queue')
if type(queue_type) == 'table' then return queue_type end
err = check(KEYS[4], 'hash', 'the waiter liveness hash')
if type(err) == 'table' then return err end
local reservation_type = check(KEYS[5], 'string', 'the hand-off reservation')
if type(reservation_type) == 'table' then return reservation_type end

local function wait_for(retry_after)
    local park = tonumber(ARGV[4])
    if park > 0 then
        if retry_after >= 0 and retry_after < park then
            park = retry_after
        end
        local now = redis.call('time')
        local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
        -- Registered until the caller's next attempt is certainly overdue (2 s of slack).
        -- The queue keeps the first arrival; liveness moves on with every attempt.
        local alive = park + 2000
        redis.call('zadd', KEYS[3], 'NX', now_ms, ARGV[3])
        redis.call('hset', KEYS[4], ARGV[3], now_ms + alive)
        for i = 3, 4 do
            if redis.call('pttl', KEYS[i]) < alive then
                redis.call('pexpire', KEYS[i], alive)
            end
        end
    end
    return {0, retry_after}
end

if lock_type == 'none' then
    local reserved = reservation_type == 'string' and redis.call('get', KEYS[5])
    if reserved and reserved ~= ARGV[3] then
        -- Handed off to another waiter, who is on its way: wait for the reservation to lapse.
        return wait_for(redis.call('pttl', KEYS[5]))
    end
    if reserved then
        redis.call('del', KEYS[5])
    end
    -- INCR first: if the counter is not an integer it fails before anything was written.
    local token = redis.call('incr', KEYS[2])
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if ARGV[5] == '0' and queue_type == 'zset' then
        redis.call('zrem', KEYS[3], ARGV[3])
        redis.call('hdel', KEYS[4], ARGV[3])
    end
    return {1, token, 1}
end

if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    if ARGV[6] == '1' then
        -- A stranded hold taken over: a new critical section, so a new fencing token (INCR
        -- before the write, as above). Reusing the old token would let fenced storage take a
        -- late write of the stranded hold for one of this new hold.
        local token = redis.call('incr', KEYS[2])
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, token, 1}
    end
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    local token = tonumber(redis.call('get', KEYS[2]) or '0') or 0
    return {1, token, holds}
end

return wait_for(redis.call('pttl', KEYS[1]))
