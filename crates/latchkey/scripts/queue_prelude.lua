-- The queue scripts' helpers, put after the prelude (src/scripts.rs): no commands run.

-- A queue's keys (QueueKeys in src/keys.rs) by role: their type, and their name in a refusal.
-- Times are ms since the epoch by the server's clock.
local QUEUE_KEYS = {
    delayed = {'zset', 'the delayed zset'}, -- item id -> due time
    items = {'hash', 'the item hash'}, -- item id -> payload
    ready = {'list', 'the ready list'}, -- item ids, taken from the left
    unacked = {'zset', 'the unacked zset'}, -- item id -> visibility deadline
    attempts = {'hash', 'the attempt hash'}, -- item id -> deliveries so far
    due = {'hash', 'the due hash'}, -- item id -> due time, kept until the item is finished
    dead = {'hash', 'the dead-letter hash'}, -- item id -> payload
    reasons = {'hash', 'the dead-letter reasons'}, -- item id -> why it was dead-lettered
}

-- Names the KEYS of a queue script by role, in order (a channel is not checked): a key of
-- another type is refused.
local function queue_keys(...)
    for i, role in ipairs({...}) do
        local key = QUEUE_KEYS[role]
        if key then
            expect_type(KEYS[i], key[1], key[2])
        end
    end
end
