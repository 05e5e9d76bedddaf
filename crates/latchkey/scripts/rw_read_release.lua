-- Release the read hold of an owner of a read-write lock. A latchkey owner counts one read
-- hold (its re-entries are its guards').
-- KEYS: lock hash, channel, the caller's read lease prefix, the lock's lease prefix.
-- ARGV: the message published when the lock is freed ("0", as Redisson's read unlock
-- publishes), the caller's read field, publish.
-- Returns -1 when the caller holds no read hold (nothing changes), otherwise 0. The lock's TTL
-- becomes the longest lease left among live holds; crashed readers are dropped; when no hold
-- is left the key is deleted and the waiters are told.
local publish = publish_command(ARGV[3])
acl_check({'del', 'hdel', 'hget', 'hgetall', 'hlen', 'pexpire', 'pttl', 'type'}, publish,
    {KEYS[2]})
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return -1
end
local mode = rw_mode(KEYS[1])
local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if not count or count < 1 then
    return -1
end
for n = 1, count do
    expect_type(KEYS[3] .. ':' .. n, 'string', 'the read lease key')
end
for n = 1, count do
    redis.call('del', KEYS[3] .. ':' .. n)
end
redis.call('hdel', KEYS[1], ARGV[2])
local longest = reap(KEYS[1], KEYS[4])
if redis.call('hlen', KEYS[1]) <= 1 then
    redis.call('del', KEYS[1])
    notify(publish, KEYS[2], ARGV[1])
    return 0
end
if mode == 'read' and longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
end
return 0
