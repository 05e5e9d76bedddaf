-- The fast path of lock_release.lua (see there for KEYS and ARGV), run before the prelude's
-- helpers are defined: the last hold of the caller's ends, no latchkey client waits and no
-- hand-off is under way. Anything else (a wrong-typed key included: the error reply of the
-- PCALL is no hold count) falls through to lock_release.lua, which decides it again.
--
-- The publish changes no key and comes first, so a refused DEL changes nothing; Redisson's
-- waiters act on the message only after the script, when the lock is gone.
if ARGV[6] == '' and (ARGV[5] == 'publish' or ARGV[5] == 'spublish') then
    local publish = ARGV[5]
    if redis.pcall('hget', KEYS[1], ARGV[3]) == '1'
        and redis.call('exists', KEYS[3], KEYS[5]) == 0 then
        redis.call(publish, KEYS[2], ARGV[1])
        redis.call('del', KEYS[1])
        return 0
    end
end
