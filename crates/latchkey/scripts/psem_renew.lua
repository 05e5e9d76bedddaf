-- Renew (or only check) a batch of permit leases in one call: the watchdog's script.
-- KEYS[i]: the lease zset of permit i. ARGV[2i - 1], ARGV[2i]: its id (32 hex digits), the new
-- lease ms (0: only check).
-- Returns 1 per permit while its lease runs, 0 once it has ended or is gone. An ended lease is
-- never extended (its permit may be reclaimed at any moment). Never writes to a key that is not
-- a zset holding the permit.
acl_check({'time', 'type', 'zadd', 'zscore'})
local now = now_ms()
local result = {}
for i, key in ipairs(KEYS) do
    local id = unhex(ARGV[2 * i - 1])
    local lease = tonumber(ARGV[2 * i])
    local held = 0
    if key_type(key) == 'zset' then
        local ends = redis.call('zscore', key, id)
        if ends and tonumber(ends) > now then
            held = 1
            if lease > 0 then
                redis.call('zadd', key, 'XX', now + lease, id)
            end
        end
    end
    result[i] = held
end
return result
