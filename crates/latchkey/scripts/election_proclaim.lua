-- Proclaim: the leader changes its value, only while it still leads in its term.
-- KEYS: leader key, change log, observe channel.
-- ARGV: the leader's owner id, its term, the new value, publish, log ttl ms.
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
