-- Move an item to the dead letters (it cannot be decoded, or it was delivered too often without
-- an ack), so that it is neither lost nor delivered again. Returns 1.
-- ARGV: the item id, the payload, the reason.
acl_check({'hdel', 'hset', 'type', 'zrem'})
queue_keys('dead', 'items', 'unacked', 'attempts', 'due', 'reasons')
redis.call('hset', KEYS[1], ARGV[1], ARGV[2])
redis.call('hset', KEYS[6], ARGV[1], ARGV[3])
redis.call('hdel', KEYS[2], ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
redis.call('hdel', KEYS[5], ARGV[1])
return 1
