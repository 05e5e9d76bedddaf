-- The wake-one hand-off's helpers (after prelude.lua): the lock's release and leave, and the
-- election's scripts.

-- The wake-one wait queue of a lock or election: `queue` (zset: client wake id -> arrival)
-- and `alive` (hash: wake id -> registered until), checked to be a zset and a hash (or absent).
-- Returns the earliest-arrived live client, taken out of both, or nil; clients that stopped
-- refreshing their registration are dropped on the way (at most 16).
local function next_waiter(queue, alive)
    local now = now_ms()
    for _ = 1, 16 do
        local head = redis.call('zrange', queue, 0, 0)[1]
        if not head then
            return nil
        end
        local until_ms = tonumber(redis.call('hget', alive, head))
        redis.call('zrem', queue, head)
        redis.call('hdel', alive, head)
        if until_ms and until_ms >= now then
            return head
        end
    end
    return nil
end

-- Hands a lock or election over to the next live waiter, if any: reserves it for that waiter's
-- client for `reserve_ms` at `hand_off` and publishes its wake id on `channel`; then publishes
-- `message`, which wakes one waiter when nobody was picked. Wait keys of other types are left
-- alone (no hand-off then).
local function hand_over(publish, channel, queue, alive, hand_off, reserve_ms, message)
    local picked = nil
    if try_call('zcard', queue) ~= nil and try_call('hlen', alive) ~= nil
        and try_call('get', hand_off) ~= nil then
        picked = next_waiter(queue, alive)
    end
    if picked then
        redis.call('set', hand_off, picked, 'PX', reserve_ms)
        notify(publish, channel, picked)
    end
    notify(publish, channel, message)
end
