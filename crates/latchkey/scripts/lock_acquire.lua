-- Acquire a lock kept as a Redisson RLock hash. Self-contained (no prelude): the hot path pays
-- for no helper it does not run.
--
-- KEYS[1]  the lock hash: field "<client-uuid>:<n>" (the acquire's owner id) -> hold count,
--          PEXPIRE = lease
-- KEYS[2]  the fencing counter (a string holding the last token; expires with ARGV[6])
-- KEYS[3]  latchkey's wait queue: zset of client wake ids scored by arrival (server ms)
-- KEYS[4]  latchkey's waiter liveness: hash of wake id -> registered until (server ms)
-- KEYS[5]  the hand-off reservation: a string holding the wake id the lock is reserved for
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field (one acquire's own: no other acquire ever uses it)
-- ARGV[3]  the caller's client wake id (a decimal number >= 2)
-- ARGV[4]  how long the caller will wait before its next attempt at most, in ms; 0 = it will
--          not wait (do not register it as a waiter)
-- ARGV[5]  after a grant: "0" drops the caller's client from the wait queue; "1" keeps it
--          (other waiters of the client still wait for this lock); "2" says the client is not
--          registered, so there is nothing to drop
-- ARGV[6]  how long the fencing counter outlives the grant, in ms
--
-- Returns {1, fencing_token} when the caller holds the lock afterwards (granted now, or by an
-- earlier sending of the same attempt, whose answer was lost), or {0, retry_after_ms} when it
-- does not (-1: the holder's lock has no expiry).
--
-- Fencing tokens: the next token is the larger of the last one + 1 and the server clock in
-- microseconds, so tokens keep increasing after the counter expired (the lock idle) and after
-- a failover lost it, as long as the server clocks do not go back.
--
-- Key types: every key is read (HLEN, GET) before the first write, and Redis refuses a read of
-- another type (WRONGTYPE): a refusal changes nothing. ACL: the commands after the first write
-- are checked before it, so a refusal changes nothing either.

-- Refuses the script (an error reply naming the command) unless the ACL user may run every
-- command of `commands`; nil when it may. Redis 7's redis.acl_check_cmd answers without
-- raising; a server without it is not checked.
local function refused(commands)
    local allowed = redis.acl_check_cmd
    if allowed then
        for _, command in ipairs(commands) do
            if not allowed(command) then
                return redis.error_reply("NOPERM this user has no permissions to run the '"
                    .. command .. "' command")
            end
        end
    end
end

-- Registers the caller's client as a waiter (unless it will not wait) and reports the retry.
local function wait_for(retry_after)
    local park = tonumber(ARGV[4])
    if park > 0 then
        if retry_after >= 0 and retry_after < park then
            park = retry_after
        end
        -- Both keys are read before either is written: a key of another type is refused
        -- (WRONGTYPE) with nothing written.
        redis.call('zscore', KEYS[3], ARGV[3])
        redis.call('hexists', KEYS[4], ARGV[3])
        local refusal = refused({'hset', 'pexpire'})
        if refusal then
            return refusal
        end
        local now = redis.call('time')
        now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
        -- Registered until the caller's next attempt is certainly overdue (2 s of slack). The
        -- queue keeps the first arrival; liveness moves on with every attempt. ZADD is the
        -- first write: it refuses a queue of another type.
        local alive = park + 2000
        redis.call('zadd', KEYS[3], 'NX', now, ARGV[3])
        redis.call('hset', KEYS[4], ARGV[3], now + alive)
        for i = 3, 4 do
            if redis.call('pttl', KEYS[i]) < alive then
                redis.call('pexpire', KEYS[i], alive)
            end
        end
    end
    return {0, retry_after}
end

-- The error reply for `command` on `key` (named `what`) refused with `err`: a key of another
-- type than `want` is named as the prelude's expect_type does, a command the ACL user may not
-- run by its name (a refusal caught by pcall carries no line to find it by), anything else as is.
local function refusal_of(err, command, what, key, want)
    if string.sub(err, 1, 9) == 'WRONGTYPE' then
        return redis.error_reply('WRONGTYPE ' .. what .. ' holds a '
            .. redis.call('type', key)['ok'] .. ', not a ' .. want)
    end
    if string.find(err, "can't run this command", 1, true) then
        return redis.error_reply("NOPERM this user has no permissions to run the '"
            .. command .. "' command")
    end
    return redis.error_reply(err)
end

local holders = redis.pcall('hlen', KEYS[1])
if type(holders) == 'table' then
    return refusal_of(holders.err, 'hlen', 'the lock key', KEYS[1], 'hash')
end
if holders > 0 then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        -- Granted to this owner by an earlier sending of this attempt: the counter has not
        -- moved since (nobody else was granted the lock meanwhile).
        return {1, tonumber(redis.call('get', KEYS[2])) or 0}
    end
    return wait_for(redis.call('pttl', KEYS[1]))
end
local reserved = redis.pcall('get', KEYS[5])
if type(reserved) == 'table' and reserved.err then
    return refusal_of(reserved.err, 'get', 'the hand-off reservation', KEYS[5], 'string')
end
if reserved and reserved ~= ARGV[3] then
    -- Handed off to another client's waiter, who is on its way: wait for the reservation.
    return wait_for(redis.call('pttl', KEYS[5]))
end
local last = redis.pcall('get', KEYS[2])
if type(last) == 'table' and last.err then
    return refusal_of(last.err, 'get', 'the fencing counter', KEYS[2], 'string')
end
if last and not tonumber(last) then
    return redis.error_reply('WRONGTYPE the fencing counter holds a string that is not a count')
end
local refusal = refused({'hset', 'pexpire', 'del', 'zrem', 'hdel'})
if refusal then
    return refusal
end
local now = redis.call('time')
local token = math.max((tonumber(last) or 0) + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
token = string.format('%d', token)
-- SET is the first write.
redis.call('set', KEYS[2], token, 'PX', string.format('%d', ARGV[1] + ARGV[6]))
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
if reserved then
    redis.call('del', KEYS[5])
end
if ARGV[5] == '0' and redis.call('zrem', KEYS[3], ARGV[3]) == 1 then
    redis.call('hdel', KEYS[4], ARGV[3])
end
return {1, tonumber(token)}
