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
-- ARGV[5]  after a grant: "0" drops the caller's client from the wait queue; "1" keeps it
--          (other waiters of the client still wait for this lock); "2" says the client is not
--          registered (none of its waiters has waited for this lock), so there is nothing to drop
-- ARGV[6]  "" or "<seq>:<grant ms>": if the caller waits, it also takes the lock granted on
--          release (to its owner field, for <grant ms>), announced with <seq>
-- ARGV[7]  "1" when the caller knows it holds nothing (no guard, no other attempt in flight):
--          a hold of its owner field found in Redis is then stranded (an acquire whose answer
--          was lost, an unlock that never arrived, a grant on release nobody took) and is reset
--          to one hold instead of re-entered
--
-- Returns {1, fencing_token, hold_count} when the caller holds the lock afterwards,
-- or {0, retry_after_ms} when it does not (-1: the holder's lock has no expiry).
--
-- Key types: a key of another type is never written and the script changes nothing. The checks
-- cost no extra calls on the hot path: every key is first *read* with a command that fails on
-- another type (HLEN, GET, ZSCORE), or, for the fencing counter, its INCR is the first write
-- (INCR fails on anything but an integer string, before anything was written).
--
-- ACL: every path reads before it writes, and checks the commands it runs after its first
-- write (acl_check) before that write: a refusal changes nothing, and the fast path pays for
-- two checks rather than one per command the script could run.

-- Register the caller's client as a waiter (unless it will not wait) and report the retry time.
local function wait_for(retry_after)
    local park = tonumber(ARGV[4])
    if park > 0 then
        if retry_after >= 0 and retry_after < park then
            park = retry_after
        end
        -- Every key is read before any is written.
        read('the wait queue', 'zset', 'zscore', KEYS[3], ARGV[3])
        read('the waiter liveness hash', 'hash', 'hexists', KEYS[4], ARGV[3])
        local now = now_ms()
        -- Registered until the caller's next attempt is certainly overdue (2 s of slack).
        -- The queue keeps the first arrival; liveness moves on with every attempt.
        local alive = park + 2000
        local entry = now + alive
        if ARGV[6] ~= '' then
            entry = entry .. ':' .. ARGV[6] .. ':' .. ARGV[2]
        end
        local short = {}
        for i = 3, 4 do
            short[i] = redis.call('pttl', KEYS[i]) < alive
        end
        -- ZADD is the first write.
        acl_check({'hset', 'pexpire'})
        redis.call('zadd', KEYS[3], 'NX', now, ARGV[3])
        redis.call('hset', KEYS[4], ARGV[3], entry)
        for i = 3, 4 do
            if short[i] then
                redis.call('pexpire', KEYS[i], alive)
            end
        end
    end
    return {0, retry_after}
end

-- The caller's registration as a waiter is dropped once it holds the lock (unless other
-- waiters of its client still wait, or it never registered). Read before the first write:
-- returns the commands the drop runs (nil: nothing to drop) and the function that runs them. A
-- wrong-typed queue is left alone (ZREM refuses it, nothing written).
--
-- When the client stays registered (its other waiters still wait), a registration of this
-- caller's that takes grants is made a plain one: the caller holds the lock now, and a grant to
-- it on the next release would go to a waiter that is no more.
local function unregistration()
    if ARGV[5] == '0' then
        return {'zrem', 'hdel'}, function()
            if try_call('zrem', KEYS[3], ARGV[3]) == 1 then
                try_call('hdel', KEYS[4], ARGV[3])
            end
        end
    elseif ARGV[5] == '1' then
        local value = try_call('hget', KEYS[4], ARGV[3])
        if value then
            local live, terms = registration(value)
            if live and terms and terms.owner == ARGV[2] then
                return {'hset'}, function()
                    redis.call('hset', KEYS[4], ARGV[3], live)
                end
            end
        end
    end
    return nil, nil
end

-- Checks the commands that run after the first write (`first`, whose refusal changes nothing):
-- `commands`, those of `more` (a list or nil) and `extra` (a command or nil).
local function check_after_first_write(commands, more, extra)
    for _, command in ipairs(more or {}) do
        commands[#commands + 1] = command
    end
    if extra then
        commands[#commands + 1] = extra
    end
    acl_check(commands)
end

-- A grant: INCR first (the first write; it fails on a corrupt counter before anything else is
-- written), then the hold.
local function grant()
    local token = redis.call('incr', KEYS[2])
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return token
end

if read('the lock key', 'hash', 'hlen', KEYS[1]) == 0 then
    local reserved = read('the hand-off reservation', 'string', 'get', KEYS[5])
    -- The pause after a streak of grants ("p") holds back waiters only: a caller that will not
    -- wait (try_lock with no wait) takes a free lock.
    local paused_for_waiters = reserved == 'p' and ARGV[4] == '0'
    if reserved and reserved ~= ARGV[3] and not is_streak(reserved) and not paused_for_waiters then
        -- Handed off to another waiter, who is on its way: wait for the reservation to lapse.
        return wait_for(redis.call('pttl', KEYS[5]))
    end
    local drop, unregister = unregistration()
    check_after_first_write({'hset', 'pexpire'}, drop, reserved and 'del')
    local token = grant()
    if reserved then
        redis.call('del', KEYS[5])
    end
    if unregister then
        unregister()
    end
    return {1, token, 1}
end

if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local drop, unregister = unregistration()
    if ARGV[7] == '1' then
        -- A stranded hold taken over: a new critical section, so a new fencing token. Reusing
        -- the old token would let fenced storage take a late write of the stranded hold for
        -- one of this new hold.
        check_after_first_write({'hset', 'pexpire'}, drop)
        local token = grant()
        if unregister then
            unregister()
        end
        return {1, token, 1}
    end
    local token = tonumber(redis.call('get', KEYS[2]) or '0') or 0
    check_after_first_write({'pexpire'}, drop)
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if unregister then
        unregister()
    end
    return {1, token, holds}
end

return wait_for(redis.call('pttl', KEYS[1]))
