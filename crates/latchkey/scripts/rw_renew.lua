-- Renew (or only check) a batch of read and write holds in one call: the watchdog's script.
-- Hold i: KEYS[2i - 1] the lock hash, KEYS[2i] the holder's read lease prefix (read holds);
-- ARGV[3i - 2] its field, ARGV[3i - 1] lease ms (0: only check), ARGV[3i] "r" or "w".
-- Returns 1 per hold while the owner still holds it, 0 once it is gone. A write hold is held
-- while the hash is in write mode with the owner's write field; a read hold while the owner's
-- read field exists and one of its lease keys is alive. Only the owner's own lease keys are
-- renewed, so a crashed reader's leases run out even while others keep reading. Never writes
-- to a key of another type.
acl_check({'exists', 'hget', 'pexpire', 'pttl', 'set', 'type'})
local result = {}
for i = 1, #KEYS / 2 do
    local key, prefix = KEYS[2 * i - 1], KEYS[2 * i]
    local field = ARGV[3 * i - 2]
    local lease = tonumber(ARGV[3 * i - 1])
    local kind = ARGV[3 * i]
    local held = 0
    if key_type(key) == 'hash' then
        local mode = redis.call('hget', key, 'mode')
        local count = tonumber(redis.call('hget', key, field))
        if kind == 'w' then
            if mode == 'write' and count then
                held = 1
            end
        elseif (mode == 'read' or mode == 'write') and count then
            for n = 1, count do
                if redis.call('exists', prefix .. ':' .. n) == 1 then
                    held = 1
                    break
                end
            end
            if held == 1 and lease > 0 then
                for n = 1, count do
                    local t = key_type(prefix .. ':' .. n)
                    if t == 'none' or t == 'string' then
                        redis.call('set', prefix .. ':' .. n, 1, 'PX', lease)
                    end
                end
            end
        end
        if held == 1 and lease > 0 and redis.call('pttl', key) < lease then
            redis.call('pexpire', key, lease)
        end
    end
    result[i] = held
end
return result
