-- The fair lock scripts' helpers, put after the prelude (src/scripts.rs): no commands run.
-- The wait queue is a list of owner ids, head first; the deadlines a zset owner id -> server ms
-- after which the entry is stale.

-- The head of the wait queue after dropping the heads whose deadline has passed by `now`, or
-- that have none (nil when nobody is left), and how many it dropped.
local function live_head(queue, deadlines, now)
    local dropped = 0
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return nil, dropped
        end
        local deadline = tonumber(redis.call('zscore', deadlines, head))
        if deadline and deadline > now then
            return head, dropped
        end
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, head)
        dropped = dropped + 1
    end
end

-- Wakes the live head on its own channel "<prefix>:<owner id>".
local function wake_head(queue, deadlines, prefix, publish, message)
    local head = live_head(queue, deadlines, now_ms())
    if head then
        notify(publish, prefix .. ':' .. head, message)
    end
end

-- Lowers by `wait` the deadline of every entry behind `owner` in `ids` (the queue).
local function lower_behind(ids, deadlines, owner, wait)
    local behind = false
    for _, id in ipairs(ids) do
        if behind then
            if redis.call('zscore', deadlines, id) then
                redis.call('zincrby', deadlines, -wait, id)
            end
        elseif id == owner then
            behind = true
        end
    end
end

-- Takes `owner` out of the wait queue and its link out of the deadline chain: the deadline of
-- every entry behind it goes down by the thread wait time `wait`, as Redisson does when a
-- waiter is served or gives up. An owner without a deadline has no link to take.
local function unlink(queue, deadlines, owner, wait)
    if redis.call('zscore', deadlines, owner) then
        if redis.call('lindex', queue, 0) == owner then
            -- The head: every other deadline is behind it (as Redisson's acquire sees it).
            for _, id in ipairs(redis.call('zrange', deadlines, 0, -1)) do
                if id ~= owner then
                    redis.call('zincrby', deadlines, -wait, id)
                end
            end
        else
            lower_behind(redis.call('lrange', queue, 0, -1), deadlines, owner, wait)
        end
        redis.call('zrem', deadlines, owner)
    end
    redis.call('lrem', queue, 0, owner)
end
