-- Campaign: become the leader of an election if nobody leads it (and it is not handed over to
-- another waiter), else register the caller's client as a waiter, as lock_acquire.lua does.
-- KEYS: leader key, term counter, wait queue, waiter liveness, hand-off reservation, change
-- log, observe channel.
-- ARGV: lease ms, the caller's owner id (one campaign's own), its wake id, park ms, after a
-- grant "0" / "1" / "2" (as lock_acquire.lua), the caller's value, publish, how long the term
-- counter and the change log outlive the grant (ms).
-- Returns {1, term} when the caller leads afterwards (elected now, or by an earlier sending of
-- the same attempt, whose answer was lost), or {0, retry_after_ms} (-1: the leader key has no
-- expiry). A key of another type is refused before anything is written.
local publish = publish_command(ARGV[7])
acl_check({'del', 'get', 'hdel', 'hexists', 'hgetall', 'hset', 'lindex', 'ltrim',
    'pexpire', 'pttl', 'rpush', 'set', 'time', 'type', 'zadd', 'zrem', 'zscore'}, publish, {KEYS[7]})
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
        return wait_in_queue(KEYS[3], KEYS[4], ARGV[3], ARGV[4], redis.call('pttl', KEYS[5]))
    end
    return grant()
end
if leader[1] == ARGV[2] then
    -- Elected by an earlier sending of this attempt.
    return {1, parse_payload(leader[2])}
end
return wait_in_queue(KEYS[3], KEYS[4], ARGV[3], ARGV[4], redis.call('pttl', KEYS[1]))
