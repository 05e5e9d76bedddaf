-- Release one hold of a reentrant lock (Redisson RLock layout).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel: redisson_lock__channel:{<name>}
-- KEYS[3]  latchkey's wait queue (zset: client wake id -> arrival, ms)
-- KEYS[4]  latchkey's waiter registrations (hash: client wake id -> registration)
-- KEYS[5]  the hand-off key (string: the wake id a free lock is reserved for, or "g<ms>" while
--          the lock passes from waiter to waiter by grants on release, since server time <ms>)
-- KEYS[6]  the fencing counter
-- KEYS[7]  the prefix of the clients' grant channels: "redisson_lock__channel:{<name>}:latchkey:"
-- ARGV[1]  the unlock message published when the lock is freed ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[2]  lease in milliseconds to keep when holds remain
-- ARGV[3]  owner field
-- ARGV[4]  how long a hand-off reservation lasts, in ms
-- ARGV[5]  the publish command: "publish", or "spublish" on a cluster (sharded pub/sub)
-- ARGV[6]  "" or a fencing token: release only while the hold is still the grant that got
--          it (the counter has not moved on), for a grant on release that nobody took
-- ARGV[7]  how long (ms) the lock may pass from waiter to waiter by grants before one release
--          frees it for others
-- ARGV[9]  the releasing client's wake id when its client listens on the unlock channel, else ""
-- ARGV[8]  how long (ms) latchkey waiters then hold back: a Redisson client's retry on the
--          unlock message wins the free lock if it comes within that time
--
-- Returns -1 when the caller does not hold the lock (nothing changes), otherwise the holds
-- left: 0 means the hold ended and the lock was handed on or freed.
--
-- When the last hold ends and latchkey clients wait, the earliest-arrived live one is picked.
-- If its registration takes grants, the lock is granted to it at once (a new fencing token,
-- its owner field, its grant lease) and announced: the client's waiter holds the lock without
-- another round trip. A registration marked for its client's grant channel (KEYS[7] and the
-- wake id) is announced there as "<token>:<seq>", one message that only that client reads;
-- otherwise (a client of an earlier version, or a channel the ACL refuses) "-<wake id>",
-- "-<token>", "-<seq>" are published in that order on the unlock channel. Redisson clients
-- read them as Java longs that are not theirs (0 or 1) and wait on: the lock is held, so no "0"
-- follows a grant. Otherwise the free lock is reserved for the picked client for ARGV[4] ms and
-- its wake id is published, so exactly one client retries instead of all of them, and "0"
-- follows for Redisson clients; latchkey clients ignore a "0" that follows a wake id. Once grants
-- have passed the lock on for ARGV[7] ms in a row, and the unlock channel has a subscriber that
-- may not be a latchkey waiter, a release frees it
-- instead and reserves it for nobody ("p") for ARGV[8] ms, so that Redisson clients, which are
-- not in latchkey's queue and do not heed reservations, get their chance; latchkey waiters
-- retry after the pause.
local publish = publish_command(ARGV[5])
-- ACL: every key is read before the first write and the commands after it are checked before
-- it, so a refusal changes nothing. Without waiters the first "write" is the publish, which
-- changes no key, and no check is needed.
--
-- HGET fails on a key of another type before anything is written; a missing key or field is
-- not ours (nothing changes).
local held = read('lock key', 'hash', 'hget', KEYS[1], ARGV[3])
if not held then
    return -1
end
if ARGV[6] ~= '' and try_call('get', KEYS[6]) ~= ARGV[6] then
    return -1
end
local holds = tonumber(held) - 1
if holds > 0 then
    -- A grant given back that was re-entered meanwhile leaves the lease as the re-entry set it.
    if ARGV[6] == '' then
        acl_check({'pexpire'})
    end
    redis.call('hset', KEYS[1], ARGV[3], holds)
    if ARGV[6] == '' then
        redis.call('pexpire', KEYS[1], ARGV[2])
    end
    return holds
end

-- Nobody waits in latchkey's queue and no hand-off is under way (the usual case): wake
-- Redisson's waiters and free the lock.
if redis.call('exists', KEYS[3], KEYS[5]) == 0 then
    notify(publish, KEYS[2], ARGV[1])
    redis.call('del', KEYS[1])
    return 0
end

-- The helper keys are only used when they have the expected types: ZRANGE, HGET and GET refuse
-- other types (pcall: the release itself stands).
local head = try_call('zrange', KEYS[3], 0, 0)
local hand_off = try_call('get', KEYS[5])
if not head or not head[1] or hand_off == nil or try_call('hget', KEYS[4], head[1]) == nil then
    notify(publish, KEYS[2], ARGV[1])
    redis.call('del', KEYS[1])
    -- DEL again: allowed, as the first was.
    if is_streak(hand_off) then
        redis.call('del', KEYS[5])
    end
    return 0
end
local now = now_ms()
local streak = is_streak(hand_off) and tonumber(string.sub(hand_off, 2)) or now
-- Whether a client that is not a latchkey waiter may wait for the lock (a Redisson client, which
-- listens on the unlock channel without registering): the channel has more subscribers than
-- the latchkey clients known to listen (those with a live registration, and the releaser's
-- client when it listens and is not registered). When it cannot tell (no PUBSUB permission,
-- an error), it assumes one may.
local function outsiders_may_wait()
    local numsub = publish == 'spublish' and 'shardnumsub' or 'numsub'
    local allowed = redis.acl_check_cmd
    if allowed and not (allowed('pubsub', numsub, KEYS[2]) and allowed('hgetall', KEYS[4])) then
        return true
    end
    local reply = redis.pcall('pubsub', numsub, KEYS[2])
    if type(reply) ~= 'table' or reply.err or not reply[2] then
        return true
    end
    local entries = try_call('hgetall', KEYS[4]) or {}
    local known, releaser_registered = 0, false
    for i = 1, #entries, 2 do
        local live = registration(entries[i + 1])
        if live and live >= now then
            known = known + 1
            releaser_registered = releaser_registered or entries[i] == ARGV[9]
        end
    end
    if ARGV[9] ~= '' and not releaser_registered then
        known = known + 1
    end
    return tonumber(reply[2]) > known
end

if now - streak >= tonumber(ARGV[7]) and not outsiders_may_wait() then
    -- Only latchkey clients wait (they are served in arrival order): the streak goes on.
    streak = now
end
if now - streak >= tonumber(ARGV[7]) then
    -- The queue stays as it is: its waiters are woken by the "0" and retry after the pause.
    acl_check({'set'})
    notify(publish, KEYS[2], ARGV[1])
    redis.call('del', KEYS[1])
    redis.call('set', KEYS[5], 'p', 'PX', ARGV[8])
    return 0
end
-- The first write is the DEL; what may follow is checked before it.
acl_check({'zrem', 'hdel', 'incr', 'hset', 'pexpire', 'set'}, publish, {KEYS[2]})
redis.call('del', KEYS[1])
local next, terms = pick_next(now)
-- A registration of the releasing owner itself is left over from an acquire of another path:
-- it takes no grant (the client's other waiters are woken instead).
if terms and terms.owner == ARGV[3] then
    terms = nil
end
if next and terms then
    -- INCR refuses a counter that is not an integer: then reserve instead of granting.
    local token = redis.pcall('incr', KEYS[6])
    if type(token) == 'number' then
        redis.call('hset', KEYS[1], terms.owner, 1)
        redis.call('pexpire', KEYS[1], terms.lease)
        redis.call('set', KEYS[5], 'g' .. streak, 'PX', terms.lease)
        local own = KEYS[7] .. next
        local allowed = redis.acl_check_cmd
        if terms.private and (not allowed or allowed(publish, own, '')) then
            notify(publish, own, string.format('%d:%s', token, terms.seq))
        else
            notify(publish, KEYS[2], '-' .. next)
            notify(publish, KEYS[2], string.format('-%d', token))
            notify(publish, KEYS[2], '-' .. terms.seq)
        end
        return 0
    end
end
if next then
    redis.call('set', KEYS[5], next, 'PX', ARGV[4])
    notify(publish, KEYS[2], next)
elseif is_streak(hand_off) then
    redis.call('del', KEYS[5])
end
notify(publish, KEYS[2], ARGV[1])
return 0
