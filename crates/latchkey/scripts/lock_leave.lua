-- A client's last waiter for a lock gave up: unregister the client, and if the lock had just
-- been handed off to it, pass the hand-off on so the queue never waits for a client that left.
-- KEYS: as lock_release.fast.lua. ARGV: the leaving wake id, reservation ms, unlock message, publish.
-- Returns 1 when a hand-off was passed on, 0 otherwise. Keys of unexpected types are left alone.
local publish = publish_command(ARGV[4])
acl_check({'del', 'get', 'hdel', 'hget', 'hlen', 'set', 'time', 'type', 'zcard', 'zrange',
    'zrem'})
local queue_type = key_type(KEYS[3])
local alive_type = key_type(KEYS[4])
local reservation_type = key_type(KEYS[5])
if queue_type ~= 'zset' or alive_type ~= 'hash' or
    (reservation_type ~= 'none' and reservation_type ~= 'string') then
    return 0
end
-- Only a hand-off meant for the leaving client of a free lock is passed on and published: the
-- publish is checked then only (before any write), so that a user who may not publish to the
-- channel still unregisters.
local handed_off = redis.call('get', KEYS[5]) == ARGV[1]
local free = key_type(KEYS[1]) == 'none'
if handed_off and free then
    acl_check({}, publish, {KEYS[2]})
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
if not handed_off then
    return 0
end
redis.call('del', KEYS[5])
if not free then
    return 0
end
hand_over(publish, KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3])
return 1
