-- Proclaim: the leader changes its value, only while it still leads in its term.
--
-- KEYS[1]  the leader key (hash: "<owner>" -> "<term>:<value>")
-- KEYS[2]  the change log (list)
-- KEYS[3]  the observe channel
-- ARGV[1]  the leader's owner id
-- ARGV[2]  its term
-- ARGV[3]  the new value
-- ARGV[4]  the publish command: "publish", or "spublish" on a cluster
-- ARGV[5]  how long the change log outlives this change, in ms
--
-- Returns 1 when the value was changed (and the change published), 0 when the caller does not
-- lead in that term (nothing changes).
local publish = publish_command(ARGV[4])
acl_check({'hget', 'hset', 'lindex', 'ltrim', 'pexpire', 'rpush', 'type'}, publish, {KEYS[3]})
local payload = read('the leader key', 'hash', 'hget', KEYS[1], ARGV[1])
if not payload then
    return 0
end
local term = parse_payload(payload)
if string.format('%d', term or 0) ~= ARGV[2] then
    return 0
end
local last = read('the change log', 'list', 'lindex', KEYS[2], -1)
redis.call('hset', KEYS[1], ARGV[1], string.format('%d', term) .. ':' .. ARGV[3])
append_log(KEYS[2], last, term, 'P', ARGV[3], ARGV[5])
notify(publish, KEYS[3], string.format('%d', term))
return 1
