-- The fast path of redlock_acquire.lua (see there for KEYS and ARGV), run before the prelude's
-- helpers are defined: the lock is free on this node. INCR is the first write (it refuses a
-- counter that is not an integer before anything is written); HSET and PEXPIRE, which follow
-- it, are checked against the ACL before it (a refusal is raised by redlock_acquire.lua).
if redis.call('exists', KEYS[1]) == 0 then
    local allowed = redis.acl_check_cmd
    if not allowed or (allowed('hset') and allowed('pexpire')) then
        local counter = redis.call('incr', KEYS[2])
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, counter}
    end
end
