-- Cancel an item that is still waiting in the delayed zset.
--
-- KEYS[1]  the delayed zset
-- KEYS[2]  the item hash
-- ARGV[1]  the item id
--
-- Returns 1 when the item was removed, 0 when it is not waiting (already ready, taken, removed,
-- or unknown); nothing changes then.
acl_check({'hdel', 'type', 'zrem'})
local function check(key, want, what)
    local t = redis.call('type', key)['ok']
    if t ~= 'none' and t ~= want then
        return redis.error_reply('WRONGTYPE ' .. what .. ' holds a ' .. t .. ', not a ' .. want)
    end
    return nil
end
local err = check(KEYS[1], 'zset', 'the delayed zset')
    or check(KEYS[2], 'hash', 'the item hash')
if err then return err end

if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('hdel', KEYS[2], ARGV[1])
return 1
