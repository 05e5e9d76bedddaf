-- The reentrant lock's helpers (before lock_acquire.lua, lock_release.lua and lock_leave.lua).
--
-- KEYS[3] is the wait queue (zset: client wake id -> arrival, server ms) and KEYS[4] the
-- waiters' registrations (hash: client wake id -> registration) in every script of the family.
--
-- A registration is "<until>": the client retries on its own until then (server ms), or
-- "<until>:<seq>:<grant ms>:<owner>": it also takes the lock granted on release, to <owner>
-- for <grant ms>, announced with the registration's <seq> (see lock_release.lua); with
-- "<seq>c" the client listens on its own grant channel for the lock, and the grant is
-- announced there.

-- The time until which a registration is live, and its grant terms (nil when it takes none).
local function registration(value)
    local live, seq, private, lease, owner = string.match(value, '^(%d+):(%d+)(c?):(%d+):(.+)$')
    if live then
        return tonumber(live), {seq = seq, private = private == 'c', lease = lease, owner = owner}
    end
    return tonumber(value), nil
end

-- Takes the earliest-arrived live waiting client out of the queue, dropping at most 16 before
-- it whose registration lapsed (they stopped retrying). Returns its wake id and grant terms,
-- or nil. Both keys must hold their types or not exist (the caller checked).
local function pick_next(now)
    for _ = 1, 16 do
        local head = redis.call('zrange', KEYS[3], 0, 0)[1]
        if not head then
            return nil
        end
        local value = redis.call('hget', KEYS[4], head)
        redis.call('zrem', KEYS[3], head)
        redis.call('hdel', KEYS[4], head)
        if value then
            local live, terms = registration(value)
            if live and live >= now then
                return head, terms
            end
        end
    end
    return nil
end

-- Whether the hand-off key (KEYS[5]) holds the start of a streak of grants on release rather
-- than a reservation (a wake id): "g<server ms>".
local function is_streak(value)
    return type(value) == 'string' and string.sub(value, 1, 1) == 'g'
end
