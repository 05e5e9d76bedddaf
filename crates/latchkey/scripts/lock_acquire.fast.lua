-- The fast path of lock_acquire.lua, run before the prelude's helpers are defined: the lock is
-- free on this node and not reserved for another client, the counter is a count, and the
-- commands after the first write (the counter's SET) are allowed. Anything else falls through
-- to lock_acquire.lua, which waits or raises the refusal; its checks are these.
local holders = redis.pcall('hlen', KEYS[1])
local reserved = redis.pcall('get', KEYS[5])
local last = redis.pcall('get', KEYS[2])
local allowed = redis.acl_check_cmd
-- A waiter's grant also leaves the queue: its keys must hold their types before the first write.
local queue_ok = ARGV[5] ~= '0'
if not queue_ok then
    local queued, alive = redis.pcall('zscore', KEYS[3], ARGV[3]),
        redis.pcall('hexists', KEYS[4], ARGV[3])
    queue_ok = not (type(queued) == 'table' and queued.err)
        and not (type(alive) == 'table' and alive.err)
end
if holders == 0 and (not reserved or reserved == ARGV[3]) and (not last or tonumber(last))
    and queue_ok and (not allowed or (allowed('hset') and allowed('pexpire')
        and (not reserved or allowed('del'))
        and (ARGV[5] ~= '0' or (allowed('zrem') and allowed('hdel'))))) then
    -- The token: the server clock in µs, written from TIME's digits (no float formatting), or
    -- the count after the last token when that is not below it.
    local now = redis.call('time')
    local token = now[1] .. string.sub('00000' .. now[2], -6)
    if last and tonumber(last) >= tonumber(token) then
        token = string.format('%d', last + 1)
    end
    redis.call('set', KEYS[2], token, 'PX', ARGV[6])
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if reserved then
        redis.call('del', KEYS[5])
    end
    if ARGV[5] == '0' and redis.call('zrem', KEYS[3], ARGV[3]) == 1 then
        redis.call('hdel', KEYS[4], ARGV[3])
    end
    return {1, tonumber(token)}
end
