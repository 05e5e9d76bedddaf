-- Release a hold of a lock (Redisson RLock layout). Bare (no prelude).
-- KEYS: lock hash, unlock channel (redisson_lock__channel:{<name>}), wait queue, waiter
-- liveness, hand-off reservation (see lock_acquire.lua).
-- ARGV: unlock message ("0", Redisson's UNLOCK_MESSAGE), owner field, reservation ms, publish.
-- Returns -1 when the owner does not hold the lock (nothing changes), 0 when its hold ended. A
-- latchkey owner counts one hold in Redis (its re-entries are its guards'), so its release
-- frees the lock. When latchkey clients wait, the free lock is reserved for the earliest-arrived
-- live one and its wake id published, so exactly one client retries instead of all of them;
-- "0" follows for Redisson clients (latchkey clients ignore a "0" that follows a wake id).
local publish = ARGV[4]
if publish ~= 'publish' and publish ~= 'spublish' then
    return redis.error_reply('ERR the publish command must be publish or spublish')
end
-- HGET refuses a key of another type before anything is written.
if not redis.call('hget', KEYS[1], ARGV[2]) then
    return -1
end
-- The helper keys are only used when they hold their types (pcall: the release stands).
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
    -- lock. The publish changes no key and comes first, so a refused DEL changes nothing.
    redis.call(publish, KEYS[2], ARGV[1])
    redis.call('del', KEYS[1])
    return 0
end
local allowed = redis.acl_check_cmd
if allowed then
    for _, command in ipairs({'del', 'hget', 'zrem', 'hdel', 'set', 'time', publish}) do
        if not allowed(command) then
            return redis.error_reply("NOPERM this user has no permissions to run the '"
                .. command .. "' command")
        end
    end
    if not allowed(publish, KEYS[2], '') then
        return redis.error_reply('NOPERM this user has no permissions to access one of the '
            .. 'channels used as arguments')
    end
end
local now = redis.call('time')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('del', KEYS[1])
-- next_waiter (prelude.lua), with the helper keys used only when they hold their types.
for _ = 1, 16 do
    local next = redis.call('zrange', KEYS[3], 0, 0)[1]
    if not next then
        break
    end
    local alive = redis.pcall('hget', KEYS[4], next)
    redis.call('zrem', KEYS[3], next)
    redis.pcall('hdel', KEYS[4], next)
    if type(alive) == 'string' and tonumber(alive) and tonumber(alive) >= now then
        local reserved = redis.pcall('set', KEYS[5], next, 'PX', ARGV[3])
        if type(reserved) == 'table' and reserved.ok then
            redis.call(publish, KEYS[2], next)
        end
        break
    end
end
redis.call(publish, KEYS[2], ARGV[1])
return 0
