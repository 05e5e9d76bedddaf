-- A client's last waiter in an election gave up: unregister the client, and if the election had
-- just been handed over to it, hand it over to the next waiter (as lock_leave.lua).
-- KEYS: leader key, the waiters' wake channel, wait queue, waiter liveness, reservation.
-- ARGV: the leaving wake id, reservation ms, the plain wake-up message ("0"), publish.
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
