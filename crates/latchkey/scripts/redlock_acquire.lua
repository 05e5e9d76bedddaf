-- RedLock: take the lock on one node. The lock is a Redisson RLock hash, so Redisson clients
-- (RedissonRedLock over RLocks of the same name) and latchkey locks on that node exclude it.
--
-- KEYS[1]  the lock hash: field <owner> -> 1, PEXPIRE = lease
-- KEYS[2]  the node's fencing counter: redisson_lock_token:{<name>} (see next_token: it
--          expires ARGV[3] ms after the hold's lease)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field (new for every acquire call)
-- ARGV[3]  how long the fencing counter outlives the grant, in ms
-- ARGV[4]  the attempt's token floor: the client's clock in microseconds, the same on every
--          node, so that nodes whose counters were in step stay in step (next_token)
--
-- Returns {1, counter} when the owner holds the lock on this node afterwards (the counter
-- moved on for a new hold), {0, pttl} when another owner holds it.
-- Key types: a key of another type is never written and the script changes nothing. HLEN fails
-- on a lock key of another type before anything is written, and the counter is read (and
-- refused if it is not a count) before the first write.
acl_check({'get', 'hexists', 'hlen', 'hset', 'pexpire', 'pttl', 'set', 'type'})
if read('the lock key', 'hash', 'hlen', KEYS[1]) == 0 then
    local counter = next_token(KEYS[2], ARGV[1] + ARGV[3], tonumber(ARGV[4]))
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, counter}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    -- This owner's earlier attempt got it (its answer was late): keep it.
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, tonumber(redis.call('get', KEYS[2]) or '0') or 0}
end
return {0, redis.call('pttl', KEYS[1])}
