-- The fair lock scripts' helpers, put after the prelude (src/scripts.rs): no commands run.

-- The head of the wait queue `queue` (a list of owner ids) after dropping the heads whose
-- deadline in `deadlines` (a zset) has passed by the server time `now`, or that have none;
-- nil when nobody is left.
local function live_head(queue, deadlines, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return nil
        end
        local deadline = tonumber(redis.call('zscore', deadlines, head))
        if deadline and deadline > now then
            return head
        end
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, head)
    end
end

-- Wakes the live head of the wait queue (see live_head) on its own channel
-- "<prefix>:<owner id>" with `message`, published with `publish`.
local function wake_head(queue, deadlines, prefix, publish, message)
    local head = live_head(queue, deadlines, now_ms())
    if head then
        notify(publish, prefix .. ':' .. head, message)
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
            local behind = false
            for _, id in ipairs(redis.call('lrange', queue, 0, -1)) do
                if behind then
                    if redis.call('zscore', deadlines, id) then
                        redis.call('zincrby', deadlines, -wait, id)
                    end
                elseif id == owner then
                    behind = true
                end
            end
        end
        redis.call('zrem', deadlines, owner)
    end
    redis.call('lrem', queue, 0, owner)
end
