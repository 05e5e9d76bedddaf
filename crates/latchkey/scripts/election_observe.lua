-- Read an election's state in one snapshot, for observers (read-only).
--
-- KEYS[1]  the leader key (hash: "<owner>" -> "<term>:<value>")
-- KEYS[2]  the term counter
-- KEYS[3]  the change log (list)
--
-- Returns {leader payload ("" when nobody leads), last term handed out (-1: never), the change
-- log (oldest first)}.
acl_check({'get', 'hgetall', 'lrange', 'type'})
local payload = ''
if expect_type(KEYS[1], 'hash', 'the leader key') == 'hash' then
    payload = redis.call('hgetall', KEYS[1])[2] or ''
end
local term = expect_count(KEYS[2], 'the term counter') or -1
local log = {}
if expect_type(KEYS[3], 'list', 'the change log') == 'list' then
    log = redis.call('lrange', KEYS[3], 0, -1)
end
return {payload, term, log}
