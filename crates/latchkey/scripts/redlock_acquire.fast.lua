-- The fast path of redlock_acquire.lua, run before the prelude's helpers are defined: the lock
-- is free on this node. The counter's SET is the first write (a counter that is not an integer
-- falls through to redlock_acquire.lua, which refuses it); HSET and PEXPIRE, which follow it,
-- are checked against the ACL before it (a refusal is raised by redlock_acquire.lua).
if redis.call('exists', KEYS[1]) == 0 then
    local allowed = redis.acl_check_cmd
    local last = redis.pcall('get', KEYS[2])
    if (not allowed or (allowed('hset') and allowed('pexpire') and allowed('set')))
        and (not last or tonumber(last)) then
        local counter = string.format('%d', math.max((tonumber(last) or 0) + 1,
            tonumber(ARGV[4])))
        redis.call('set', KEYS[2], counter, 'PX', string.format('%d', ARGV[1] + ARGV[3]))
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, tonumber(counter)}
    end
end
