-- The fast path of redlock_release.lua: the owner holds the lock on this node (a wrong-typed
-- key falls through: the PCALL's error reply is not 1). The publish changes no key and comes
-- first, so a refused DEL changes nothing; Redisson's waiters act on it only after the script,
-- when the lock is gone.
if ARGV[3] == 'publish' or ARGV[3] == 'spublish' then
    local publish = ARGV[3]
    if redis.pcall('hexists', KEYS[1], ARGV[1]) == 1 then
        redis.call(publish, KEYS[2], ARGV[2])
        redis.call('del', KEYS[1])
        return 1
    end
end
