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

-- The reply of a `redis.pcall`, for a caller that handles a key of another type itself: a
-- WRONGTYPE error is returned, any other error (a refusal, out of memory, …) raised again.
local function wrongtype_only(reply)
    if type(reply) == 'table' and reply.err and string.sub(reply.err, 1, 9) ~= 'WRONGTYPE' then
        error(reply)
    end
    return reply
end
