-- End a job's run: record its outcome as the job's last run, or, for the outcome
-- "handed back" (a node shutting down, or a claim whose answer was lost), end its lease so
-- that another node retries the occurrence at once.
--
-- KEYS[1]  the job hash, KEYS[2] the job's run hash, KEYS[3] the group's index, KEYS[4] the
--          group's channel
-- ARGV[1]  owner field of the run
-- ARGV[2]  the job's name
-- ARGV[3]  the outcome ("ok", "failed: …", "timed out", "panicked", "handed back")
-- ARGV[4]  how long the group's keys live without a claim or a registration (ms)
-- ARGV[5]  the publish command
--
-- Returns 0 when the run was the owner's and has ended, -1 when it was not (its lease ran out
-- and another node retried it, or it ended already): nothing changes then.
local publish = publish_command(ARGV[5])
acl_check({'del', 'hdel', 'hexists', 'hlen', 'hmget', 'hset', 'pexpire', 'pttl', 'time',
    'zadd', 'zscore'}, publish, {KEYS[4]})
local job = read_job(KEYS[1], KEYS[2], KEYS[3], ARGV[2], 'run_owner', 'run_token', 'run_due',
    'run_started', 'run_attempt', 'next_due')
if job[1] ~= ARGV[1] then
    return -1
end
local now = now_ms()
redis.call('del', KEYS[2])
if ARGV[3] ~= 'handed back' then
    redis.call('hset', KEYS[1], 'last_owner', job[1], 'last_token', job[2], 'last_due', job[3],
        'last_started', job[4], 'last_attempt', job[5], 'last_finished',
        string.format('%d', now), 'last_outcome', ARGV[3])
    redis.call('hdel', KEYS[1], 'run_owner', 'run_token', 'run_due', 'run_started',
        'run_attempt', 'run_overlap')
end
touch(KEYS[1], KEYS[2], KEYS[3], ARGV[2], tonumber(job[6]), now, tonumber(ARGV[4]), publish,
    KEYS[4])
return 0
