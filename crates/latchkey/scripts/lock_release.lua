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
local publish = publish_command(ARGV[5])
acl_check({'del', 'get', 'hdel', 'hget', 'hset', 'pexpire', 'set', 'time', 'type', 'zrange',
    'zrem'}, publish, {KEYS[2]})
-- HGET fails on a key of another type before anything is written; a missing key or field is
-- not ours (nothing changes).
local held = read('lock key', 'hash', 'hget', KEYS[1], ARGV[3])
if not held then
    return -1
end
local holds = tonumber(held) - 1
if holds > 0 then
    redis.call('hset', KEYS[1], ARGV[3], holds)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return holds
end
redis.call('del', KEYS[1])

-- The earliest-arrived live waiting client, if any. The helper keys are only read and written
-- when they have the expected types: ZRANGE and HGET refuse other types (pcall: the release
-- itself stands), and nothing is written before both were read.
local function pick_next()
    local head = try_call('zrange', KEYS[3], 0, 0)
    if not head or not head[1] or try_call('get', KEYS[5]) == nil then
        return nil
    end
    local now = now_ms()
    -- Skip (and drop) at most 16 waiters that stopped refreshing their registration.
    local candidate = head[1]
    for _ = 1, 16 do
        local alive = try_call('hget', KEYS[4], candidate)
        if alive == nil then
            return nil -- the liveness key holds another type: no hand-off
        end
        redis.call('zrem', KEYS[3], candidate)
        redis.call('hdel', KEYS[4], candidate)
        alive = tonumber(alive)
        if alive and alive >= now then
            return candidate
        end
        candidate = redis.call('zrange', KEYS[3], 0, 0)[1]
        if not candidate then
            return nil
        end
    end
    return nil
end

local next = pick_next()
if next then
    redis.call('set', KEYS[5], next, 'PX', ARGV[4])
    notify(publish, KEYS[2], next)
end
notify(publish, KEYS[2], ARGV[1])
return 0
