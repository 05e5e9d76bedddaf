-- Release a hold of a lock (Redisson RLock layout). This fast path (nobody queued) runs before
-- the prelude; lock_release.lua, after it, hands the lock to a queued latchkey client.
-- KEYS: lock hash, unlock channel (redisson_lock__channel:{<name>}), wait queue, waiter
-- liveness, hand-off reservation (see lock_acquire.lua).
-- ARGV: unlock message ("0", Redisson's UNLOCK_MESSAGE), owner field, reservation ms, publish.
-- Returns -1 when the owner does not hold the lock (no key changes; with nobody queued, "0"
-- was published), 0 when its hold ended. A latchkey owner counts one hold in Redis (its
-- re-entries are its guards'), so its release frees the lock (its field is the hash's only
-- one). When latchkey clients wait, the free lock is reserved for the earliest-arrived live one
-- and its wake id published, so exactly one client retries instead of all of them; "0" follows
-- for Redisson clients (latchkey clients ignore a "0" that follows a wake id).
local publish = ARGV[4]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
-- The wait queue is only used when it is a zset (pcall: the release stands).
local head = redis.pcall('zrange', KEYS[3], 0, 0)
if head.err and string.find(head.err, "can't run this command", 1, true) then
    -- Named: a refusal caught by pcall carries no line to find the command by.
    return redis.error_reply("NOPERM this user has no permissions to run the 'zrange' command")
end
if head.err and string.sub(head.err, 1, 9) ~= 'WRONGTYPE' then
    return redis.error_reply(head.err)
end
if head.err or not head[1] then
    -- Nobody waits in latchkey's queue (the usual case): wake Redisson's waiters and free the
    -- lock. The publish changes no key and comes first, so a refused HDEL (or a lock key of
    -- another type) changes no key; the HDEL is the ownership check too, and the hash goes with
    -- its only field. An owner that no longer holds the lock (its lease ran out) has woken
    -- Redisson's waiters for nothing: they try once and wait again.
    redis.call(publish, KEYS[2], ARGV[1])
    return redis.call('hdel', KEYS[1], ARGV[2]) - 1
end
