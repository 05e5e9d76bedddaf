-- RedLock: release the lock on one node if the owner holds it, and wake its waiters.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel: redisson_lock__channel:{<name>}
-- ARGV[1]  owner field
-- ARGV[2]  the unlock message ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[3]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
--
-- Returns 1 when the owner's hold was deleted, 0 when it did not hold the lock on this node
-- (nothing changes then: another owner's lock is untouched).
local publish = publish_command(ARGV[3])
acl_check({'del', 'hexists', 'type'}, publish, {KEYS[2]})
-- HEXISTS fails on a key of another type before anything is written (0 for a missing key).
if read('the lock key', 'hash', 'hexists', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('del', KEYS[1])
notify(publish, KEYS[2], ARGV[2])
return 1
