-- Shared by the scheduler's scripts (after prelude.lua). A job of a group is three keys in the
-- group's slot: the job hash (schedule `spec`, `next_due`, last `token`, the unfinished run's
-- `run_*`, the last finished run's `last_*`, `skipped`), the run hash (a lock hash: the
-- claiming owner's field -> 1, whose PEXPIRE is the run's lease, renewed by its watchdog) and
-- the group's index (zset: job name -> when a node must act on it next, server ms).

-- When a node must act on job `job` next (server ms): its next occurrence `next_due`, or
-- earlier the end of the lease of its unfinished run (another node retries that run then), or
-- `now` when that lease has run out.
local function next_action(job, run, next_due, now)
    if redis.call('hexists', job, 'run_owner') == 1 then
        local left = redis.call('pttl', run)
        if left < 0 then
            return now
        end
        return math.min(next_due, now + left)
    end
    return next_due
end

-- Keeps the job hash and the group's index `ttl` ms past `horizon` (server ms): a job due in a
-- month is not forgotten before then.
local function keep(job, index, horizon, now, ttl)
    local ms = math.max(ttl, horizon - now + ttl)
    redis.call('pexpire', job, string.format('%d', ms))
    if redis.call('pttl', index) < ms then
        redis.call('pexpire', index, string.format('%d', ms))
    end
end

-- Indexes job `name` at its next action, keeps the group's keys `ttl` ms past it, and wakes
-- the group's nodes (a message on `channel`) when `publish` is given.
local function touch(job, run, index, name, next_due, now, ttl, publish, channel)
    local action = next_action(job, run, next_due, now)
    redis.call('zadd', index, string.format('%d', action), name)
    keep(job, index, math.max(action, next_due), now, ttl)
    if publish then
        notify(publish, channel, name)
    end
end

-- The job's fields `...` (HMGET), the key types of the job, run and index checked before
-- anything is written.
local function read_job(job, run, index, name, ...)
    local fields = read('the job', 'hash', 'hmget', job, ...)
    read('the job run', 'hash', 'hlen', run)
    read('the job index', 'zset', 'zscore', index, name)
    return fields
end
