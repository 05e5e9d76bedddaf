-- Delete a lock whoever holds it, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel
-- ARGV[1]  the unlock message ("0")
-- ARGV[2]  the publish command: "publish", or "spublish" on a cluster
--
-- Returns 1 when a lock was deleted, 0 when there was none. A key of another type is an
-- error and is left alone: force-unlock never deletes data that is not a lock.
local publish = publish_command(ARGV[2])
acl_check({'del', 'type'}, publish, {KEYS[2]})
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return 0
end
redis.call('del', KEYS[1])
notify(publish, KEYS[2], ARGV[1])
return 1
