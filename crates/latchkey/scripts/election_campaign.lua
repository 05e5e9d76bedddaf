-- Campaign: become the leader of an election if nobody leads it (and it is not handed over to
-- another waiter), else register the caller's client as a waiter. The wait queue works as the
-- lock's (scripts/lock_acquire.lua): releases hand over to the earliest-arrived live waiter.
--
-- KEYS[1]  the leader key: hash, one field "<owner>" -> "<term>:<value>", PEXPIRE = lease
-- KEYS[2]  the term counter (a string holding the last term, see next_token)
-- KEYS[3]  the wait queue: zset of client wake ids scored by arrival (server ms)
-- KEYS[4]  the waiter liveness: hash of wake id -> registered until (server ms)
-- KEYS[5]  the hand-off reservation: a string holding the wake id the election is reserved for
-- KEYS[6]  the change log (list)
-- KEYS[7]  the observe channel
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the caller's owner id (one campaign's own)
-- ARGV[3]  the caller's client wake id
-- ARGV[4]  how long the caller waits before its next attempt at most, in ms (0: it will not
--          wait, do not register it)
-- ARGV[5]  after a grant: "0" drops the caller's client from the wait queue, "1" keeps it
--          (other waiters of the client still wait), "2" it is not registered
-- ARGV[6]  the caller's value
-- ARGV[7]  the publish command: "publish", or "spublish" on a cluster
-- ARGV[8]  how long the term counter and the change log outlive the grant, in ms
--
-- Returns {1, term} when the caller leads afterwards (elected now, or by an earlier sending
-- of the same attempt, whose answer was lost), or {0, retry_after_ms} when it does not
-- (-1: the leader key has no expiry). A key of another type is refused before anything is
-- written.
local publish = publish_command(ARGV[7])
acl_check({'del', 'get', 'hdel', 'hexists', 'hgetall', 'hset', 'lindex', 'ltrim',
    'pexpire', 'pttl', 'rpush', 'set', 'time', 'type', 'zadd', 'zrem', 'zscore'}, publish, {KEYS[7]})

local function wait_for(retry_after)
    local park = tonumber(ARGV[4])
    if park > 0 then
        if retry_after >= 0 and retry_after < park then
            park = retry_after
        end
        read('the wait queue', 'zset', 'zscore', KEYS[3], ARGV[3])
        read('the waiter liveness hash', 'hash', 'hexists', KEYS[4], ARGV[3])
        local now = now_ms()
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

local leader = read('the leader key', 'hash', 'hgetall', KEYS[1])
local reserved = read('the hand-off reservation', 'string', 'get', KEYS[5])
local last = read('the change log', 'list', 'lindex', KEYS[6], -1)

local function grant()
    -- The counter's SET is the first write: a corrupt counter fails before anything is written.
    local term = next_token(KEYS[2], ARGV[1] + ARGV[8])
    local _, kind, last_term = parse_entry(last)
    if kind and kind ~= 'N' then
        -- The last term ended without a resignation (it expired, or was stranded).
        append_log(KEYS[6], last, last_term, 'N', '', ARGV[1] + ARGV[8])
        last = redis.call('lindex', KEYS[6], -1)
    end
    redis.call('del', KEYS[1])
    redis.call('hset', KEYS[1], ARGV[2], string.format('%d', term) .. ':' .. ARGV[6])
    redis.call('pexpire', KEYS[1], ARGV[1])
    append_log(KEYS[6], last, term, 'L', ARGV[6], ARGV[1] + ARGV[8])
    if reserved then
        redis.call('del', KEYS[5])
    end
    if ARGV[5] == '0' and try_call('zrem', KEYS[3], ARGV[3]) == 1 then
        try_call('hdel', KEYS[4], ARGV[3])
    end
    notify(publish, KEYS[7], string.format('%d', term))
    return {1, term}
end

if #leader == 0 then
    if reserved and reserved ~= ARGV[3] then
        -- Handed over to another waiter, who is on its way: wait for the reservation to lapse.
        return wait_for(redis.call('pttl', KEYS[5]))
    end
    return grant()
end
if leader[1] == ARGV[2] then
    -- Elected by an earlier sending of this attempt.
    return {1, parse_payload(leader[2])}
end
return wait_for(redis.call('pttl', KEYS[1]))
