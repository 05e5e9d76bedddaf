-- Release a hold again on a new primary after a Sentinel failover: the release first went to
-- the demoted primary and may never have reached the replica that was promoted, which would
-- keep the hold until its lease runs out. Sent for the owner's last hold only.
-- KEYS: lock hash, fencing counter, unlock channel.
-- ARGV: owner field, the token of the hold that was released, unlock message, publish.
-- Only a hold that is still the latest grant is touched: if the counter moved past the token,
-- somebody (maybe this very owner) was granted the lock since. Returns 1 when it released one.
local publish = publish_command(ARGV[4])
acl_check({'del', 'get', 'hget', 'hset'}, publish, {KEYS[3]})
local token = try_call('get', KEYS[2])
if type(token) ~= 'string' or token ~= ARGV[2] then
    return 0
end
local held = try_call('hget', KEYS[1], ARGV[1])
if type(held) ~= 'string' then
    return 0
end
local holds = tonumber(held) - 1
if holds > 0 then
    redis.call('hset', KEYS[1], ARGV[1], holds)
    return 1
end
redis.call('del', KEYS[1])
notify(publish, KEYS[3], ARGV[3])
return 1
