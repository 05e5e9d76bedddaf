-- The fair lock scripts' helpers, put after the prelude (src/scripts.rs): no commands run.

-- Wakes the head of the wait queue `queue` (a list of owner ids) on its own channel
-- "<prefix>:<owner id>" with `message`, published with `publish`. Heads whose deadline in
-- `deadlines` (a zset) has passed by the server clock, or that have none, are dropped first, so
-- the message goes to a waiter that is still there.
local function wake_head(queue, deadlines, prefix, publish, message)
    local now = now_ms()
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return
        end
        local deadline = tonumber(redis.call('zscore', deadlines, head))
        if deadline and deadline > now then
            notify(publish, prefix .. ':' .. head, message)
            return
        end
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, head)
    end
end
