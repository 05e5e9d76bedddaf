-- latchkey's prelude, put before every script (src/scripts.rs): helpers, no commands run.
--
-- Conventions of every script: a "publish" ARGV is the publish command, "publish", or
-- "spublish" on a cluster (sharded pub/sub); times are server ms (TIME) unless said otherwise.
-- Lua scripts are not rolled back, so a script checks key types and the ACL before its first
-- write: a refusal changes nothing.

-- Refuses the script unless the ACL user may run every command of `commands` and, with
-- `publish`, publish to every channel of `channels` (Redis checks the keys before the script
-- starts). The refusal is the reply Redis gives a plain command, which names what to grant.
-- Redis 7's `redis.acl_check_cmd` answers without raising; a server without it is not checked.
local function acl_check(commands, publish, channels)
    local allowed = redis.acl_check_cmd
    if not allowed then
        return
    end
    if publish then
        commands[#commands + 1] = publish
    end
    for _, command in ipairs(commands) do
        if not allowed(command) then
            error({err = "NOPERM this user has no permissions to run the '" .. command
                .. "' command"})
        end
    end
    for _, channel in ipairs(channels or {}) do
        if not allowed(publish, channel, '') then
            error({err = 'NOPERM this user has no permissions to access one of the channels used'
                .. ' as arguments'})
        end
    end
end

-- The publish command ARGV `name`, refused before any command runs unless publish or spublish.
local function publish_command(name)
    if name ~= 'publish' and name ~= 'spublish' then
        error({err = 'ERR the publish command must be publish or spublish'})
    end
    return name
end

local function notify(publish, channel, message)
    return redis.call(publish, channel, message)
end

local function now_us()
    local now = redis.call('time')
    return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- `up`: rounded up, for a deadline that must not come before a full timeout has passed.
local function now_ms(up)
    local ms = now_us() / 1000
    if up then
        return math.ceil(ms)
    end
    return math.floor(ms)
end

-- 'none' when the key does not exist.
local function key_type(key)
    return redis.call('type', key)['ok']
end

-- "WRONGTYPE <text>", which the Rust side reports as Error::WrongType.
local function wrong_type(text)
    error({err = 'WRONGTYPE ' .. text})
end

-- Refuses a key of another type than `want` ("<what> holds a <type>, not a <want>"); returns
-- the key's type, 'none' or `want`.
local function expect_type(key, want, what)
    local found = key_type(key)
    if found ~= 'none' and found ~= want then
        wrong_type(what .. ' holds a ' .. found .. ', not a ' .. want)
    end
    return found
end

-- The integer held by the string `key`, nil when it does not exist; another type, or a string
-- that is not an integer, is refused.
local function expect_count(key, what)
    if expect_type(key, 'string', what) == 'none' then
        return nil
    end
    local count = tonumber(redis.call('get', key))
    if count == nil then
        wrong_type(what .. ' holds a string that is not a count')
    end
    return count
end

-- On a hot path a TYPE call per key is one call too many: the script reads each key with the
-- command it needs anyway, which Redis refuses on a key of another type. The reply, or nil when
-- the key holds another type; any other error is raised again, an ACL refusal named (Redis's
-- own does not say which command it was).
local function try_call(command, key, ...)
    local reply = redis.pcall(command, key, ...)
    if type(reply) == 'table' and reply.err then
        if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
            return nil
        end
        if string.find(reply.err, "can't run this command", 1, true) then
            error({err = "NOPERM this user has no permissions to run the '" .. command
                .. "' command"})
        end
        error(reply)
    end
    return reply
end

-- try_call, a key of another type refused as expect_type does.
local function read(what, want, command, key, ...)
    local reply = try_call(command, key, ...)
    if reply == nil then
        expect_type(key, want, what)
    end
    return reply
end

-- The next fencing token of the counter `key`, written back with the expiry `ttl_ms`: the
-- larger of the last token + 1 and `floor` (by default the server clock in microseconds), so
-- that tokens keep increasing after the counter expired (its object idle) and after a failover
-- lost it, as long as the clocks do not go back. A counter that is not a count is refused
-- before anything is written; the SET is the caller's first write when it comes first.
local function next_token(key, ttl_ms, floor)
    local last = read('the fencing counter', 'string', 'get', key)
    if last and not tonumber(last) then
        wrong_type('the fencing counter holds a string that is not a count')
    end
    local token = string.format('%d', math.max((tonumber(last) or 0) + 1, floor or now_us()))
    redis.call('set', key, token, 'PX', string.format('%d', ttl_ms))
    return tonumber(token)
end

-- Registers the caller's client `wake_id` in a wake-one wait queue (see next_waiter), unless it
-- will not wait (`park` 0 ms), and reports {0, retry_after}. Registered until its next attempt
-- is certainly overdue (2 s of slack); the queue keeps the first arrival, the liveness moves on
-- with every attempt. Both keys are read before either is written.
local function wait_in_queue(queue, alive, wake_id, park, retry_after)
    park = tonumber(park)
    if park > 0 then
        if retry_after >= 0 and retry_after < park then
            park = retry_after
        end
        read('the wait queue', 'zset', 'zscore', queue, wake_id)
        read('the waiter liveness hash', 'hash', 'hexists', alive, wake_id)
        acl_check({'hset', 'pexpire'})
        local now = now_ms()
        local live = park + 2000
        redis.call('zadd', queue, 'NX', now, wake_id)
        redis.call('hset', alive, wake_id, now + live)
        for _, key in ipairs({queue, alive}) do
            if redis.call('pttl', key) < live then
                redis.call('pexpire', key, live)
            end
        end
    end
    return {0, retry_after}
end
