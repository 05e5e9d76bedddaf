-- Cancel an item that is still waiting in the delayed zset. ARGV: the item id.
-- Returns 1 when the item was removed, 0 when it is not waiting (already ready, taken, removed,
-- or unknown); nothing changes then.
acl_check({'hdel', 'type', 'zrem'})
queue_keys('delayed', 'items', 'due')
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('hdel', KEYS[2], ARGV[1])
redis.call('hdel', KEYS[3], ARGV[1])
return 1
