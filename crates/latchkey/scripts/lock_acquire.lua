-- Acquire a lock kept as a Redisson RLock hash. A free lock is granted by the fast path
-- (lock_acquire.fast.lua), which runs before the prelude: the hot path pays for no helper.
--
-- KEYS: lock hash (field "<client id>:<n>", the acquire's owner id -> hold count; PEXPIRE =
-- lease), fencing counter, wait queue, waiter liveness, hand-off reservation (a string: the
-- wake id a free lock is reserved for); see next_waiter in prelude.lua.
-- ARGV: lease ms, owner field, the caller's wake id (a decimal >= 2), park ms (the longest
-- wait before its next attempt; 0: it will not wait, do not register it), after a grant "0"
-- drops the caller's client from the queue, "1" keeps it (other waiters of the client wait for
-- this lock), "2" it is not registered; the counter's expiry (ms: the lease and
-- the idle time after it).
--
-- Returns {1, token} when the caller holds the lock afterwards (granted now, or by an earlier
-- sending of the same attempt, whose answer was lost), or {0, retry_after_ms} (-1: the holder's
-- lock has no expiry). Tokens as next_token. Every key is read before the first write, and the
-- commands after it are checked against the ACL before it: a refusal changes nothing.
if read('the lock key', 'hash', 'hlen', KEYS[1]) > 0 then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        -- Granted to this owner by an earlier sending of this attempt: the counter has not
        -- moved since (nobody else was granted the lock meanwhile).
        return {1, tonumber(redis.call('get', KEYS[2])) or 0}
    end
    return wait_in_queue(KEYS[3], KEYS[4], ARGV[3], ARGV[4], redis.call('pttl', KEYS[1]))
end
local reserved = read('the hand-off reservation', 'string', 'get', KEYS[5])
if reserved and reserved ~= ARGV[3] then
    -- Handed off to another client's waiter, who is on its way: wait for the reservation.
    return wait_in_queue(KEYS[3], KEYS[4], ARGV[3], ARGV[4], redis.call('pttl', KEYS[5]))
end
local last = read('the fencing counter', 'string', 'get', KEYS[2])
if last and not tonumber(last) then
    wrong_type('the fencing counter holds a string that is not a count')
end
local queued = ARGV[5] == '0'
if queued then
    read('the wait queue', 'zset', 'zscore', KEYS[3], ARGV[3])
    read('the waiter liveness', 'hash', 'hexists', KEYS[4], ARGV[3])
end
-- The fast path's check: DEL only for a reservation, ZREM and HDEL only for a queued waiter.
acl_check({'hset', 'pexpire', reserved and 'del' or 'hset', queued and 'zrem' or 'hset',
    queued and 'hdel' or 'hset'})
-- Every check of the fast path passed, so it granted the lock: not reached.
error({err = 'ERR lock_acquire: a free lock was not granted by the fast path'})
