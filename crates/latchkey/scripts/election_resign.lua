-- Resign: the leader gives up its leadership, which is handed over at once to the earliest-
-- arrived live waiter (as a lock release hands over, scripts/lock_release.lua).
--
-- KEYS[1]  the leader key (hash: "<owner>" -> "<term>:<value>")
-- KEYS[2]  the wake channel of the waiters
-- KEYS[3]  the wait queue (zset: client wake id -> arrival, ms)
-- KEYS[4]  the waiter liveness (hash: client wake id -> registered until, ms)
-- KEYS[5]  the hand-off reservation (string: wake id)
-- ARGV[1]  the leader's owner id
-- ARGV[2]  how long a hand-off reservation lasts, in ms
-- ARGV[3]  the plain wake-up message ("0")
-- ARGV[4]  the publish command: "publish", or "spublish" on a cluster
-- ARGV[5]  "" or the term of the leadership to resign; a leadership of the owner id in another
--          term is left alone (the resignation sent again to a new primary after a Sentinel
--          failover)
-- ARGV[6]  how long the change log outlives this change, in ms
-- KEYS[6]  the change log (list)
-- KEYS[7]  the observe channel
--
-- Returns 0 when the leadership was given up, -1 when the caller did not lead (nothing changes).
-- (An owner id is one campaign's own: it leads at most one term.)
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
