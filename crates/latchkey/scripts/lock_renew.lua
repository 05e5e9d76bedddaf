-- Renew (or only check) a batch of held locks in one call: the watchdog's script.
-- KEYS[i]: lock hash i. ARGV[2i - 1], ARGV[2i]: its owner field, lease ms (0: only check).
-- Returns 1 per lock the owner still holds, 0 when it is gone (expired, deleted, taken over or
-- replaced by a key of another type). Never writes to a key that is not a hash the owner holds.
acl_check({'hexists', 'pexpire'})
local result = {}
for i, key in ipairs(KEYS) do
    local field = ARGV[2 * i - 1]
    local lease = tonumber(ARGV[2 * i])
    local held = 0
    if try_call('hexists', key, field) == 1 then
        held = 1
        if lease > 0 then
            redis.call('pexpire', key, lease)
        end
    end
    result[i] = held
end
return result
