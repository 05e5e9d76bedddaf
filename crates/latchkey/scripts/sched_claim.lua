-- Claim an occurrence of a job for one node, atomically. The node runs it under a lease (the
-- run hash, renewed by its watchdog); no other node claims the job while that lease lasts. An
-- occurrence is claimed once: the job's next_due moves past it in the same call. A run whose
-- lease ran out unfinished (its node died or stalled) is claimed again, as a retry with a
-- higher token, before any later occurrence. Due times are decided by the server's clock.
--
-- KEYS[1]  the job hash, KEYS[2] the job's run hash, KEYS[3] the group's index, KEYS[4] the
--          group's channel
-- ARGV[1]  lease in ms
-- ARGV[2]  owner field (the claim's own)
-- ARGV[3]  the job's name
-- ARGV[4]  'claim': run occurrence ARGV[7]; 'skip': pass over the due occurrences without
--          running them; 'retry': run the unfinished run of occurrence ARGV[5] again
-- ARGV[5]  claim, skip: the job's next_due as the caller knows it; retry: the run's occurrence
-- ARGV[6]  claim, skip: the job's next_due afterwards
-- ARGV[7]  claim: the occurrence to run (ms; next_due, or a later one when catching up)
-- ARGV[8]  claim, skip: how many due occurrences the call passes over without running them
-- ARGV[9]  what an occurrence due while the claimed run goes on gets: 'skip' or 'queue' (it
--          waits for the run); kept with the run
-- ARGV[10] how long the group's keys live without a claim or a registration (ms)
-- ARGV[11] the publish command
-- ARGV[12] the job's schedule as the caller registered it: a caller whose schedule is not the
--          registered one (the last registration wins) claims nothing
-- ARGV[13] the server's clock as the caller reckoned it when it planned (ms): a server clock
--          behind it (a failover, a clock stepped back) sends the caller back to plan again
--
-- Returns {1, token}: claimed (also to a call sent again after it claimed). {0, wait_ms, now}: nothing to do for wait_ms (not due yet, or a
-- run goes on). {2, due, attempts, now}: the unfinished run of occurrence `due` (tried
-- `attempts` times) must be retried first. {3, next_due, now}: ARGV[5] is not the job's next
-- occurrence (another node claimed or skipped it). {4, next_due, now}: skipped. {-1}: the job
-- is not registered (its keys expired). {5, now}: the caller's schedule is not the registered
-- one.
local publish = publish_command(ARGV[11])
acl_check({'hexists', 'hincrby', 'hlen', 'hmget', 'hset', 'pexpire', 'pttl', 'time', 'zadd',
    'zscore'}, publish, {KEYS[4]})
local job = read_job(KEYS[1], KEYS[2], KEYS[3], ARGV[3], 'next_due', 'run_owner', 'run_due',
    'run_attempt', 'token', 'run_overlap', 'run_token', 'spec')
local next_due = tonumber(job[1])
if not next_due then
    return {-1}
end
if job[2] == ARGV[2] then
    return {1, tonumber(job[7])}
end
local now = now_ms()
if job[8] ~= ARGV[12] then
    return {5, now}
end
if now < tonumber(ARGV[13]) then
    return {0, tonumber(ARGV[13]) - now, now}
end
local expected = tonumber(ARGV[5])
local ttl = tonumber(ARGV[10])

-- Takes occurrence `due` for the caller (attempt `attempt`) and returns its token: the last
-- one + 1, at least the server's clock in µs (as a lock's), so that tokens keep increasing
-- also when a failover lost the last claim or the job's keys expired.
local function claim(due, attempt)
    local token = string.format('%d', math.max((tonumber(job[5]) or 0) + 1, now_us()))
    redis.call('hset', KEYS[1], 'token', token, 'run_owner', ARGV[2], 'run_token', token,
        'run_due', string.format('%d', due), 'run_attempt', attempt, 'run_started',
        string.format('%d', now), 'run_overlap', ARGV[9])
    redis.call('hset', KEYS[2], ARGV[2], 1)
    redis.call('pexpire', KEYS[2], ARGV[1])
    return tonumber(token)
end

-- Moves next_due to ARGV[6], counting `skipped` occurrences passed over.
local function advance(skipped)
    redis.call('hset', KEYS[1], 'next_due', ARGV[6])
    if skipped > 0 then
        redis.call('hincrby', KEYS[1], 'skipped', skipped)
    end
    return tonumber(ARGV[6])
end

-- A run goes on: the nodes look again in `wait` ms (the index says so, so that a message of
-- the group does not send them here before), and the job's keys are kept meanwhile.
local function later(wait)
    redis.call('zadd', KEYS[3], 'XX', string.format('%d', now + wait), ARGV[3])
    keep(KEYS[1], KEYS[3], next_due, now, ttl)
    return {0, wait, now}
end

if job[2] then
    -- An unfinished run.
    local left = redis.call('pttl', KEYS[2])
    if left > 0 then
        if expected ~= next_due or ARGV[4] == 'retry' then
            return {3, next_due, now}
        end
        if now < next_due then
            return later(math.min(left, next_due - now))
        end
        -- An occurrence came due while the run goes on: it gets what the run was claimed with
        -- (a catch-up run is followed by the next occurrence, whatever the job's policy).
        if (job[6] or ARGV[9]) == 'queue' then
            return later(left)
        end
        -- Passed over: the ones the call would have skipped, and the one it would have run.
        local next = advance(tonumber(ARGV[8]) + (ARGV[4] == 'claim' and 1 or 0))
        touch(KEYS[1], KEYS[2], KEYS[3], ARGV[3], next, now, ttl, publish, KEYS[4])
        return {4, next, now}
    end
    -- Its lease ran out: retry it, first.
    local run_due = tonumber(job[3])
    local attempts = tonumber(job[4]) or 1
    if ARGV[4] ~= 'retry' or expected ~= run_due then
        return {2, run_due, attempts, now}
    end
    local token = claim(run_due, attempts + 1)
    touch(KEYS[1], KEYS[2], KEYS[3], ARGV[3], next_due, now, ttl, publish, KEYS[4])
    return {1, token}
end
if ARGV[4] == 'retry' or expected ~= next_due then
    return {3, next_due, now}
end
if now < next_due then
    return {0, next_due - now, now}
end
local next = advance(tonumber(ARGV[8]))
if ARGV[4] == 'skip' then
    touch(KEYS[1], KEYS[2], KEYS[3], ARGV[3], next, now, ttl, publish, KEYS[4])
    return {4, next, now}
end
local token = claim(tonumber(ARGV[7]), 1)
touch(KEYS[1], KEYS[2], KEYS[3], ARGV[3], next, now, ttl, publish, KEYS[4])
return {1, token}
