-- RedLock: raise one node's fencing counter to the token of a new quorum hold.
-- KEYS: lock hash, the node's fencing counter. ARGV: owner field, the hold's token (the largest
-- counter of the nodes that granted it), how long the counter lives on (ms).
-- Returns 1 when the owner still holds the lock on this node and the counter is now at least
-- the token, 0 otherwise (nothing changes then). Because the raise happens while the owner
-- holds the node, every later holder of this node increments past the token.
acl_check({'get', 'hexists', 'pttl', 'set', 'type'})
if key_type(KEYS[1]) ~= 'hash' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return 0
end
if (expect_count(KEYS[2], 'the fencing counter') or 0) < tonumber(ARGV[2]) then
    -- At least as long as the lock, and a while after.
    local ttl = math.max(redis.call('pttl', KEYS[1]), 0) + tonumber(ARGV[3])
    redis.call('set', KEYS[2], ARGV[2], 'PX', string.format('%d', ttl))
end
return 1
