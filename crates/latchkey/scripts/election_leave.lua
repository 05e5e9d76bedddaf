-- A client's last waiter in an election gave up: unregister the client, and if the election had
-- just been handed over to it, hand it over to the next waiter, so that the queue never waits
-- for a client that left.
--
-- KEYS[1]  the leader key
-- KEYS[2]  the wake channel of the waiters
-- KEYS[3]  the wait queue (zset: client wake id -> arrival, ms)
-- KEYS[4]  the waiter liveness (hash: client wake id -> registered until, ms)
-- KEYS[5]  the hand-off reservation (string: wake id)
-- ARGV[1]  the leaving client's wake id
-- ARGV[2]  how long a hand-off reservation lasts, in ms
-- ARGV[3]  the plain wake-up message ("0")
-- ARGV[4]  the publish command: "publish", or "spublish" on a cluster
--
-- Returns 1 when a hand-off was passed on, 0 otherwise. Keys of unexpected types are left alone.
local publish = publish_command(ARGV[4])
acl_check({'del', 'get', 'hdel', 'hget', 'hlen', 'set', 'time', 'type', 'zcard',
    'zrange', 'zrem'})
if try_call('zcard', KEYS[3]) == nil or try_call('hlen', KEYS[4]) == nil then
    return 0
end
local reserved = try_call('get', KEYS[5])
if reserved == nil then
    return 0
end
local handed_over = reserved == ARGV[1]
local vacant = key_type(KEYS[1]) == 'none'
if handed_over and vacant then
    -- Only then is anything published: checked before the first write.
    acl_check({}, publish, {KEYS[2]})
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
if not handed_over then
    return 0
end
redis.call('del', KEYS[5])
if not vacant then
    return 0
end
hand_over(publish, KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3])
return 1
