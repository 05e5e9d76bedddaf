-- Give permits back to a semaphore and wake waiters (Redisson's RSemaphore layout).
-- KEYS: the available permits, latchkey's total record, the channel redisson_sc:{<name>}.
-- ARGV: how many (>= 1), publish, "held": permits a guard holds (taken by an acquire),
-- released whatever the counts say; "check": permits released without a guard, refused when
-- they would leave more available than the record of the total.
-- Returns {1, available_after} when released; the new count is published, as Redisson does
-- (waiters wake up to that many of their own). Returns {0, total} and changes nothing when a
-- "check" release would over-release. Without a total record (a Redisson-made semaphore)
-- every release is accepted.
-- Redisson clients change the count without updating the record (addPermits, release,
-- trySetPermits after a delete, setPermits), so the record can be lower than the real total.
-- A "held" release is never refused for that: those permits were taken out of the count, so
-- giving them back is always right. When the count ends above the record, the record is raised
-- to it: the semaphore evidently has at least that many permits.
local publish = publish_command(ARGV[2])
acl_check({'get', 'incrby', 'set', 'type'}, publish, {KEYS[3]})
local mode = ARGV[3]
if mode ~= 'held' and mode ~= 'check' then
    return redis.error_reply('ERR the release mode must be held or check')
end
local available = expect_count(KEYS[1], 'the semaphore key')
local total = expect_count(KEYS[2], 'the semaphore total')
local n = tonumber(ARGV[1])
if mode == 'check' and total ~= nil and (available or 0) + n > total then
    return {0, total}
end
local value = redis.call('incrby', KEYS[1], n)
if total ~= nil and value > total then
    redis.call('set', KEYS[2], value)
end
notify(publish, KEYS[3], value)
return {1, value}
