-- latchkey's prelude, put before every script (src/scripts.rs): helpers, no commands run.

-- Refuses the script, before it writes anything, unless the ACL user may run every command of
-- `commands` and, when `publish` (`publish` or `spublish`) is given, publish to every channel of
-- `channels` (the keys are checked by Redis before the script starts). Lua scripts are not
-- rolled back: a command refused halfway would leave the writes before it in place. The
-- refusal is the reply Redis gives a plain command, which names what to grant. Redis 7's
-- `redis.acl_check_cmd` answers without raising; a server without it is not checked.
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

-- The publish command a script was given (an ARGV): "publish", or "spublish" on a cluster
-- (sharded pub/sub). Anything else is refused before the script runs a command.
local function publish_command(name)
    if name ~= 'publish' and name ~= 'spublish' then
        error({err = 'ERR the publish command must be publish or spublish'})
    end
    return name
end

-- Publishes `message` on `channel` with `publish` (as returned by publish_command).
local function notify(publish, channel, message)
    return redis.call(publish, channel, message)
end

-- The server's clock (TIME) in microseconds.
local function now_us()
    local now = redis.call('time')
    return tonumber(now[1]) * 1000000 + tonumber(now[2])
end

-- The server's clock in milliseconds, rounded down; `up`: rounded up, for a deadline that must
-- not come before a full timeout has passed.
local function now_ms(up)
    local ms = now_us() / 1000
    if up then
        return math.ceil(ms)
    end
    return math.floor(ms)
end

-- Key types, checked before the first write: a key of another type is never written.
--
-- The type of `key` ('none' when it does not exist), for a script that leaves a key of another
-- type alone.
local function key_type(key)
    return redis.call('type', key)['ok']
end

-- Refuses the script: "WRONGTYPE <text>" (the Rust side reports it as Error::WrongType).
local function wrong_type(text)
    error({err = 'WRONGTYPE ' .. text})
end

-- Refuses a key of another type than `want`: "WRONGTYPE <what> holds a <type>, not a <want>"
-- Returns the key's type, 'none' or `want`.
local function expect_type(key, want, what)
    local found = key_type(key)
    if found ~= 'none' and found ~= want then
        wrong_type(what .. ' holds a ' .. found .. ', not a ' .. want)
    end
    return found
end

-- The integer held by the string `key`, nil when it does not exist; another type, or a string
-- that is not an integer, is refused as a WRONGTYPE naming `what`.
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
-- command it needs anyway, which Redis refuses on a key of another type.
--
-- The reply of `command` on `key`, or nil when the key holds another type (the caller leaves
-- it alone). Any other error (a refusal, out of memory, ...) is raised again.
local function try_call(command, key, ...)
    local reply = redis.pcall(command, key, ...)
    if type(reply) == 'table' and reply.err then
        if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
            return nil
        end
        -- An ACL refusal, named: Redis's own does not say which command it was.
        if string.find(reply.err, "can't run this command", 1, true) then
            error({err = "NOPERM this user has no permissions to run the '" .. command
                .. "' command"})
        end
        error(reply)
    end
    return reply
end

-- The reply of `command` on `key`; a key of another type is refused as expect_type does.
local function read(what, want, command, key, ...)
    local reply = try_call(command, key, ...)
    if reply == nil then
        expect_type(key, want, what)
    end
    return reply
end

-- The next fencing token of the counter `key` (a string holding the last token), written back
-- with the expiry `ttl_ms`: the larger of the last token + 1 and `floor` (by default the server
-- clock in microseconds), so that tokens keep increasing after the counter expired (its object
-- idle) and after a failover lost it, as long as the clocks do not go back. A counter that is
-- not a count is refused (WRONGTYPE) before anything is written; the SET is the caller's first
-- write when it comes first.
local function next_token(key, ttl_ms, floor)
    local last = read('the fencing counter', 'string', 'get', key)
    if last and not tonumber(last) then
        wrong_type('the fencing counter holds a string that is not a count')
    end
    local token = string.format('%d', math.max((tonumber(last) or 0) + 1, floor or now_us()))
    redis.call('set', key, token, 'PX', string.format('%d', ttl_ms))
    return tonumber(token)
end
