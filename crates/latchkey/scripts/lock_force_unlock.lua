-- Delete a lock whoever holds it, and wake its waiters.
-- KEYS: lock hash, unlock channel. ARGV: unlock message ("0"), publish.
-- Returns 1 when a lock was deleted, 0 when there was none. A key of another type is refused:
-- force-unlock never deletes data that is not a lock.
local publish = publish_command(ARGV[2])
acl_check({'del', 'type'}, publish, {KEYS[2]})
if expect_type(KEYS[1], 'hash', 'lock key') == 'none' then
    return 0
end
redis.call('del', KEYS[1])
notify(publish, KEYS[2], ARGV[1])
return 1
