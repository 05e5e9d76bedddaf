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

-- Indexes job `name` at its next action, keeps the group's keys `ttl` ms more, and wakes the
-- group's nodes (a message on `channel`) when `publish` is given.
local function touch(job, run, index, name, next_due, now, ttl, publish, channel)
    redis.call('zadd', index, string.format('%d', next_action(job, run, next_due, now)), name)
    redis.call('pexpire', job, ttl)
    if redis.call('pttl', index) < ttl then
        redis.call('pexpire', index, ttl)
    end
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
