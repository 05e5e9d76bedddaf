-- RedLock: release the lock on one node if the owner holds it, and wake its waiters.
-- KEYS: lock hash, unlock channel. ARGV: owner field, unlock message ("0"), publish.
-- Returns 1 when the owner's hold was deleted, 0 when it did not hold the lock on this node
-- (nothing changes then: another owner's lock is untouched).
local publish = publish_command(ARGV[3])
acl_check({'del', 'hexists', 'type'}, publish, {KEYS[2]})
if read('the lock key', 'hash', 'hexists', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('del', KEYS[1])
notify(publish, KEYS[2], ARGV[2])
return 1
