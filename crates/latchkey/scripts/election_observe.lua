-- Read an election's state in one snapshot (read-only). KEYS: leader key, term counter, log.
-- Returns {leader payload ("" when nobody leads), last term handed out (-1: never), the change
-- log (oldest first)}.
acl_check({'get', 'hgetall', 'lrange', 'type'})
expect_type(KEYS[1], 'hash', 'the leader key')
local payload = redis.call('hgetall', KEYS[1])[2] or ''
local term = expect_count(KEYS[2], 'the term counter') or -1
expect_type(KEYS[3], 'list', 'the change log')
return {payload, term, redis.call('lrange', KEYS[3], 0, -1)}
