-- Move an item to the dead letters (it cannot be decoded, or it was delivered too often without
-- an ack), so that it is neither lost nor delivered again.
--
-- KEYS[1]  the dead-letter hash: item id -> payload
-- KEYS[2]  the item hash
-- KEYS[3]  the unacked zset
-- KEYS[4]  the attempt hash
-- KEYS[5]  the due hash
-- KEYS[6]  the dead letters' reasons: item id -> why it was dead-lettered
-- ARGV[1]  the item id
-- ARGV[2]  the payload
-- ARGV[3]  the reason
--
-- Returns 1.
acl_check({'hdel', 'hset', 'type', 'zrem'})
expect_type(KEYS[1], 'hash', 'the dead-letter hash')
expect_type(KEYS[6], 'hash', 'the dead-letter reasons')
expect_type(KEYS[2], 'hash', 'the item hash')
expect_type(KEYS[3], 'zset', 'the unacked zset')
expect_type(KEYS[4], 'hash', 'the attempt hash')
expect_type(KEYS[5], 'hash', 'the due hash')

redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
redis.call('hset', KEYS[6], ARGV[1], ARGV[3])
redis.call('hdel', KEYS[2], ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
redis.call('hdel', KEYS[5], ARGV[1])
return 1
