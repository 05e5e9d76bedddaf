-- The rate limiter scripts' helpers, put after the prelude (src/scripts.rs): no commands run.
--
-- Every rate limiter script gets the five keys of Redisson's RRateLimiter, in Redisson's order,
-- so that a cluster routes it to the limiter's slot and Java clients find the same data:
--
-- KEYS[1]  the config: a hash with `rate` (permits per interval), `interval` (ms), `type` ("0"
--          overall, "1" per client) and `keepAliveTime` (ms; "0" or absent: none)
-- KEYS[2]  {name}:value               permits left in the window (string holding an integer)
-- KEYS[3]  {name}:value:<client id>   the same, this client's, for a per-client limiter
-- KEYS[4]  {name}:permits             the grants of the window: a zset of packed members
--                                     (below) scored by the time of the grant (ms)
-- KEYS[5]  {name}:permits:<client id> the same, this client's, for a per-client limiter
--
-- The counter and the log keep one invariant: counter + permits logged = rate. A grant logs its
-- permits and takes them off the counter; a grant older than the interval goes back to the
-- counter and leaves the log.

-- The config, or nil when the rate was never set (Redisson needs `rate`, `interval` and
-- `type`). A config key of another type, or fields that are not numbers, are refused
-- (WRONGTYPE) before anything is written.
local function read_config()
    local fields = read('the rate limiter config', 'hash', 'hmget', KEYS[1],
        'rate', 'interval', 'type', 'keepAliveTime')
    if not fields[1] or not fields[2] or not fields[3] then
        return nil
    end
    local rate = tonumber(fields[1])
    local interval = tonumber(fields[2])
    if rate == nil or interval == nil then
        wrong_type('the rate limiter config holds a hash whose rate or interval is not a number')
    end
    return {
        rate = rate,
        interval = interval,
        per_client = fields[3] == '1',
        keep_alive = tonumber(fields[4] or '0') or 0,
    }
end

-- Refuses (WRONGTYPE) a config key that is another object's hash (a lock's, say): fields, but
-- none of `rate`, `interval`, `type`. Setting a rate there would break that object.
local function refuse_foreign_hash(rate, interval, kind)
    if not rate and not interval and not kind
        and redis.call('hlen', KEYS[1]) > 0 then
        wrong_type('the rate limiter config is a hash of something else (a lock?), not a '
            .. 'rate limiter\'s config: nothing was changed')
    end
end

-- The counter and log keys of the window `config` uses: this client's for a per-client limiter.
local function window_keys(config)
    if config.per_client then
        return KEYS[3], KEYS[5]
    end
    return KEYS[2], KEYS[4]
end

-- The counter at `key`: a number, or nil when there is none. A key of another type or a
-- string that is not a count is refused (WRONGTYPE).
local function read_counter(key)
    local value = read('the rate limiter counter', 'string', 'get', key)
    if not value then
        return nil
    end
    local count = tonumber(value)
    if count == nil then
        wrong_type('the rate limiter counter holds a string that is not a count')
    end
    return count
end

-- A log member as Redisson packs it: the length of the random part (one byte), the random
-- part, the permits (an unsigned int in the server's byte order).
local function pack_grant(random, permits)
    return struct.pack('Bc0I', string.len(random), random, permits)
end

-- The random part and the permits of a log member.
local function unpack_grant(member)
    local random, permits = struct.unpack('Bc0I', member)
    return random, permits
end

-- The permits of the members of `list`, read every `step` elements (2 for a reply WITHSCORES).
local function sum_grants(list, step)
    local sum = 0
    for i = 1, #list, step do
        local _, permits = unpack_grant(list[i])
        sum = sum + permits
    end
    return sum
end

-- Redisson's expiry rule, after every acquire and release: with a keep-alive time, the config
-- and the window's keys expire when the limiter has been idle that long; without one, the
-- window's keys expire with the config (if somebody gave it a TTL), and a client's own window
-- an interval after its last use.
local function keep_alive(config, value_key, log_key)
    if config.keep_alive > 0 then
        redis.call('pexpire', KEYS[1], config.keep_alive)
        redis.call('pexpire', value_key, config.keep_alive)
        redis.call('pexpire', log_key, config.keep_alive)
        return
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', value_key, ttl)
        redis.call('pexpire', log_key, ttl)
    elseif config.per_client then
        -- Only this client uses its window, and an interval after its last grant the window is
        -- empty again: it expires then (Redisson keeps it, a pair of keys per client process
        -- ever started).
        redis.call('pexpire', value_key, config.interval)
        redis.call('pexpire', log_key, config.interval)
    end
end

-- The commands keep_alive may run, for acl_check.
local KEEP_ALIVE_COMMANDS = {'pexpire', 'pttl'}

-- Appends the entries of `more` to `list` and returns `list`.
local function with(list, more)
    for _, entry in ipairs(more) do
        list[#list + 1] = entry
    end
    return list
end
