-- Acknowledge a delivery: the item is done and is never delivered again. ARGV: the item id.
-- Returns 1 when this call finished the item, 0 when it was already finished (acknowledged
-- through another delivery of it, or removed). Any delivery of the item may acknowledge it, even
-- one whose visibility timeout ran out: the work is done either way. An id left in the ready
-- list is skipped by the next take.
acl_check({'hdel', 'type', 'zrem'})
queue_keys('unacked', 'items', 'attempts', 'due')
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('hdel', KEYS[3], ARGV[1])
redis.call('hdel', KEYS[4], ARGV[1])
return redis.call('hdel', KEYS[2], ARGV[1])
