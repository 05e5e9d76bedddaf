-- The transfer: move due items from the delayed zset, and unacknowledged deliveries whose
-- visibility timeout ran out, to the ready list. Bounded: at most ARGV[1] of each per call, so
-- a flood of due items never blocks Redis for long; the caller calls again while work is left.
-- Idempotent: several clients may run it at once; each item moves exactly once.
-- KEYS: delayed zset, ready list, unacked zset, ready channel (see queue_prelude.lua).
-- ARGV: the most items to move from each zset, publish.
-- Returns {moved from the delayed zset, redelivered from the unacked zset, earliest due time
-- left or -1, earliest visibility deadline left or -1, server time in microseconds, then for
-- the client's metrics: items in the ready list (-1 if this user may not LLEN), in the delayed
-- zset, in the unacked zset (after the moves), and per item moved from the delayed zset how
-- late it was in microseconds}.
expect_type(KEYS[1], 'zset', 'the delayed zset')
expect_type(KEYS[2], 'list', 'the ready list')
expect_type(KEYS[3], 'zset', 'the unacked zset')
local publish = publish_command(ARGV[2])
acl_check({'rpush', 'time', 'type', 'zcard', 'zrange', 'zrangebyscore', 'zrem'}, publish, {KEYS[4]})
local limit = tonumber(ARGV[1])
local clock_us = now_us()
local now = math.floor(clock_us / 1000)
local step = 1000
-- Deliveries never acknowledged in time go back to the head of the ready list, oldest first.
local expired = redis.call('zrangebyscore', KEYS[3], '-inf', now, 'LIMIT', 0, limit)
if #expired > 0 then
    -- LPUSH is checked only here, still before the first write: without it, due items still
    -- move as long as no delivery expires.
    acl_check({'lpush'})
    for i = #expired, 1, -1 do
        redis.call('lpush', KEYS[2], expired[i])
    end
    for i = 1, #expired, step do
        redis.call('zrem', KEYS[3], unpack(expired, i, math.min(i + step - 1, #expired)))
    end
end
-- Due items go to the tail in due order (ties in id order).
local scored = redis.call('zrangebyscore', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
local due, late = {}, {}
for i = 1, #scored, 2 do
    due[#due + 1] = scored[i]
    late[#late + 1] = math.max(0, clock_us - tonumber(scored[i + 1]) * 1000)
end
for i = 1, #due, step do
    local j = math.min(i + step - 1, #due)
    redis.call('rpush', KEYS[2], unpack(due, i, j))
    redis.call('zrem', KEYS[1], unpack(due, i, j))
end
if #due + #expired > 0 then
    notify(publish, KEYS[4], #due + #expired)
end
local function first_score(key)
    return tonumber(redis.call('zrange', key, 0, 0, 'WITHSCORES')[2]) or -1
end
-- The depths, for metrics: LLEN only where the user may run it (it is not needed otherwise).
local ready_len = -1
if not redis.acl_check_cmd or redis.acl_check_cmd('llen') then
    ready_len = redis.call('llen', KEYS[2])
end
local reply = {#due, #expired, first_score(KEYS[1]), first_score(KEYS[3]), clock_us, ready_len,
    redis.call('zcard', KEYS[1]), redis.call('zcard', KEYS[3])}
for i = 1, #late do
    reply[#reply + 1] = late[i]
end
return reply
