-- Resign: the leader gives up its leadership, which is handed over at once to the earliest-
-- arrived live waiter (as a lock release hands over).
-- KEYS: as election_leave.lua, then the change log and the observe channel.
-- ARGV: the leader's owner id, reservation ms, the plain wake-up message ("0"), publish, "" or
-- the term of the leadership to resign (a leadership of the owner id in another term is left
-- alone: the resignation sent again to a new primary after a Sentinel failover), log ttl ms.
-- Returns 0 when the leadership was given up, -1 when the caller did not lead (nothing
-- changes). An owner id is one campaign's own: it leads at most one term.
local publish = publish_command(ARGV[4])
acl_check({'del', 'get', 'hdel', 'hget', 'hlen', 'lindex', 'ltrim', 'pexpire', 'rpush', 'set', 'time',
    'type', 'zcard', 'zrange', 'zrem'}, publish, {KEYS[2], KEYS[7]})
local payload = read('the leader key', 'hash', 'hget', KEYS[1], ARGV[1])
if not payload then
    return -1
end
local term = parse_payload(payload)
if ARGV[5] ~= '' and string.format('%d', term or 0) ~= ARGV[5] then
    return -1
end
local last = read('the change log', 'list', 'lindex', KEYS[6], -1)
redis.call('del', KEYS[1])
append_log(KEYS[6], last, term, 'N', '', ARGV[6])
notify(publish, KEYS[7], string.format('%d', term))
hand_over(publish, KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3])
return 0
