-- The fast path of lock_acquire.lua (see there for KEYS and ARGV), run before the prelude's
-- helpers are defined, so that the usual acquire pays neither for them nor for the checks of
-- the paths it does not take: a free lock, nothing reserved, a caller that is not in the wait
-- queue (ARGV[5] == "2"). Anything else falls through to lock_acquire.lua, which decides it
-- again from the start.
--
-- Neither key exists, so neither has another type. INCR is the first write (it refuses a
-- counter that is not an integer before anything is written); HSET and PEXPIRE, which follow
-- it, are checked against the ACL before it (a refusal is raised by lock_acquire.lua).
if ARGV[5] == '2' and redis.call('exists', KEYS[1], KEYS[5]) == 0 then
    local allowed = redis.acl_check_cmd
    if not allowed or (allowed('hset') and allowed('pexpire')) then
        local token = redis.call('incr', KEYS[2])
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, token, 1}
    end
end
