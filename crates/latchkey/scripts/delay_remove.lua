-- Cancel an item that is still waiting in the delayed zset.
--
-- KEYS[1]  the delayed zset
-- KEYS[2]  the item hash
-- KEYS[3]  the due hash
-- ARGV[1]  the item id
--
-- Returns 1 when the item was removed, 0 when it is not waiting (already ready, taken, removed,
-- or unknown); nothing changes then.
acl_check({'hdel', 'type', 'zrem'})
expect_type(KEYS[1], 'zset', 'the delayed zset')
expect_type(KEYS[2], 'hash', 'the item hash')
expect_type(KEYS[3], 'hash', 'the due hash')

if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('hdel', KEYS[2], ARGV[1])
redis.call('hdel', KEYS[3], ARGV[1])
return 1
