-- Release one hold of a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel: redisson_lock__channel:{<name>}
-- KEYS[3]  latchkey's wait queue (zset: client wake id -> arrival, ms)
-- KEYS[4]  latchkey's waiter liveness (hash: client wake id -> registered until, ms)
-- KEYS[5]  the hand-off reservation (string: wake id)
-- ARGV[1]  the unlock message published when the lock is freed ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[2]  lease in milliseconds to keep when holds remain
-- ARGV[3]  owner field
-- ARGV[4]  how long a hand-off reservation lasts, in ms
-- ARGV[5]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns -1 when the caller does not hold the lock (nothing changes), otherwise the holds
-- left: 0 means the key was deleted and waiters were told.
--
-- When the lock is freed and latchkey clients wait for it, the earliest-arrived live one is
-- picked: the lock is reserved for it for ARGV[4] ms and its wake id is published, so exactly
-- one client retries instead of all of them. "0" is published in every case, for Redisson
-- clients; latchkey clients ignore a "0" that directly follows a wake id.
local publish = ARGV[5]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
local lock_type = redis.call('type', KEYS[1])['ok']
if lock_type == 'none' then
    return -1
end
if lock_type ~= 'hash' then
    return redis.error_reply('WRONGTYPE lock key holds a ' .. lock_type .. ', not a hash')
end
-- Hand off only when the helper keys have the expected types (never overwrite other data).
local function types_ok()
    local queue_type = redis.call('type', KEYS[3])['ok']
    local alive_type = redis.call('type', KEYS[4])['ok']
    local reservation_type = redis.call('type', KEYS[5])['ok']
    return queue_type == 'zset' and (alive_type == 'none' or alive_type == 'hash')
        and (reservation_type == 'none' or reservation_type == 'string')
end

local hand_off = types_ok()

if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return -1
end
local holds = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if holds > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return holds
end
redis.call('del', KEYS[1])
local function pick_next()
    local now = redis.call('time')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    -- Skip (and drop) at most 16 waiters that stopped refreshing their registration.
    for _ = 1, 16 do
        local head = redis.call('zrange', KEYS[3], 0, 0)[1]
        if not head then
            return nil
        end
        local alive = tonumber(redis.call('hget', KEYS[4], head))
        redis.call('zrem', KEYS[3], head)
        redis.call('hdel', KEYS[4], head)
        if alive and alive >= now_ms then
            return head
        end
    end
    return nil
end

if hand_off then
    local next = pick_next()
    if next then
        redis.call('set', KEYS[5], next, 'PX', ARGV[4])
        redis.call(publish, KEYS[2], next)
    end
end
redis.call(publish, KEYS[2], ARGV[1])
return 0
