-- RedLock: take the lock on one node. The lock is a Redisson RLock hash, so Redisson clients
-- (RedissonRedLock over RLocks of the same name) and latchkey locks on that node exclude it.
-- KEYS: lock hash (field <owner> -> 1, PEXPIRE = lease), the node's fencing counter
-- (redisson_lock_token:{<name>}).
-- ARGV: lease ms, owner field (new for every acquire call), how long the counter outlives the
-- grant (ms), the attempt's token floor: the client's clock in microseconds, the same on every
-- node, so that nodes whose counters were in step stay in step (next_token).
-- Returns {1, counter} when the owner holds the lock on this node afterwards (the counter moved
-- on for a new hold), {0, pttl} when another owner holds it. HLEN and the counter's read refuse
-- keys of other types before anything is written.
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
