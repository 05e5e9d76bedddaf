-- Release one hold of a fair lock (Redisson RedissonFairLock layout) and, when the lock is
-- freed, pass it on to the head of the queue: granted to it when it is a latchkey waiter that
-- takes grants, or else woken on its own channel.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the wait queue (list of owner ids, head first)
-- KEYS[3]  the waiters' deadlines (zset owner id -> server ms)
-- KEYS[4]  the wake channel prefix; the head listens on "<prefix>:<owner id>"
-- KEYS[5]  latchkey's grant registrations (hash owner id -> "<until>:<seq>:<grant ms>:<W ms>",
--          see fair_acquire.lua)
-- KEYS[6]  the fencing counter
-- ARGV[1]  the wake message ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[2]  lease in milliseconds to keep when holds remain
-- ARGV[3]  owner id
-- ARGV[4]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
-- ARGV[5]  "" or a fencing token: release only while the hold is still the grant that got it
--          (the counter has not moved on), for a grant on release that its waiter did not take
--
-- Returns -1 when the caller does not hold the lock (nothing of the lock changes), otherwise
-- the holds left: 0 means the key was deleted and the lock was passed on. Stale queue entries
-- are dropped first, so the lock goes to a waiter that is still there.
--
-- Passing the lock on: if the head registered for grants and its registration is live (it
-- attempted within its park + 2 s), the lock becomes the head's at once (a new fencing token,
-- one hold, the registration's grant lease), the head leaves the queue as if its own acquire
-- had taken the lock (the deadlines behind it go down by its W), and "<token>:<seq>" on its
-- channel tells it: it holds the lock without another round trip, and confirms the short grant
-- lease with its watchdog. Any other head (a Redisson waiter, a latchkey waiter that takes no
-- grants or stopped attempting) is woken with "0" and takes the lock with its own acquire, as
-- Redisson's release does. Grants need the commands listed in grant(); a user without them
-- wakes instead. The queue is left alone if its keys have unexpected types.
local publish = publish_command(ARGV[4])
acl_check({'del', 'hexists', 'hincrby', 'lindex', 'lpop', 'pexpire', 'time', 'type', 'zrem',
    'zscore'}, publish)
local lock_type = expect_type(KEYS[1], 'hash', 'lock key')
local queue_type = key_type(KEYS[2])
local deadlines_type = key_type(KEYS[3])
local queue_ok = (queue_type == 'none' or queue_type == 'list')
    and (deadlines_type == 'none' or deadlines_type == 'zset')

-- Grants the free lock to `head` if it registered for grants; returns whether it did.
local function grant(head, now)
    local allowed = redis.acl_check_cmd
    if allowed then
        for _, command in ipairs({'hget', 'hdel', 'hset', 'incr', 'lrange', 'lrem', 'zincrby',
            'zrange'}) do
            if not allowed(command) then
                return false
            end
        end
    end
    -- A registrations key of another type, or any refusal (a server without acl_check_cmd),
    -- grants nothing: the head is woken instead.
    local terms = grant_terms(redis.pcall('hget', KEYS[5], head), now)
    if not terms then
        return false
    end
    -- INCR refuses a counter that is not an integer: then wake instead.
    local token = redis.pcall('incr', KEYS[6])
    if type(token) ~= 'number' then
        return false
    end
    redis.call('hset', KEYS[1], head, 1)
    redis.call('pexpire', KEYS[1], terms.lease)
    unlink(KEYS[2], KEYS[3], head, terms.wait)
    redis.call('hdel', KEYS[5], head)
    notify(publish, KEYS[4] .. ':' .. head, string.format('%d:%s', token, terms.seq))
    return true
end

-- Passes the free lock on to the live head of the queue, unless the queue's keys have
-- unexpected types.
local function pass_on()
    if not queue_ok then
        return
    end
    local now = now_ms()
    local head = live_head(KEYS[2], KEYS[3], now)
    if head and not grant(head, now) then
        notify(publish, KEYS[4] .. ':' .. head, ARGV[1])
    end
end

if lock_type == 'none' then
    -- The lock is gone (expired or forced): the head may take it, whoever asked.
    pass_on()
    return -1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return -1
end
if ARGV[5] ~= '' then
    acl_check({'get'})
    if try_call('get', KEYS[6]) ~= ARGV[5] then
        return -1
    end
end
local holds = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if holds > 0 then
    -- A grant given back that was re-entered meanwhile leaves the lease as the re-entry set it.
    if ARGV[5] == '' then
        redis.call('pexpire', KEYS[1], ARGV[2])
    end
    return holds
end
redis.call('del', KEYS[1])
pass_on()
return 0
