-- Register a job of a scheduler group: its schedule, and its next occurrence when it has none
-- yet or its schedule changed (a node with a new schedule was deployed). A job registered
-- already keeps its next occurrence, also one in the past (the nodes then catch up as the
-- job's missed-runs policy says).
--
-- KEYS[1]  the job hash, KEYS[2] the job's run hash, KEYS[3] the group's index
-- ARGV[1]  the job's name
-- ARGV[2]  the job's schedule, as text (the same on every node of the group)
-- ARGV[3]  the job's first occurrence after the server's clock, as the caller computed it (ms)
-- ARGV[4]  how long the group's keys live without a claim or a registration (ms)
--
-- Returns {next_due, now} (server ms).
acl_check({'hexists', 'hlen', 'hmget', 'hset', 'pexpire', 'pttl', 'time', 'zadd', 'zscore'})
local fields = read_job(KEYS[1], KEYS[2], KEYS[3], ARGV[1], 'spec', 'next_due')
local now = now_ms()
local next_due = tonumber(fields[2])
if fields[1] ~= ARGV[2] or not next_due then
    next_due = tonumber(ARGV[3])
    redis.call('hset', KEYS[1], 'spec', ARGV[2], 'next_due', ARGV[3])
end
touch(KEYS[1], KEYS[2], KEYS[3], ARGV[1], next_due, now, tonumber(ARGV[4]))
return {next_due, now}
