-- Helpers of the leader election scripts (src/election.rs), put after the shared prelude.
--
-- The leader key is a hash with one field, the leader's owner id, holding "<term>:<value>": the
-- layout of a held lock (one owner field, PEXPIRE = lease), so the lock's renew script keeps it.
-- The term is the election's fencing token (next_token: terms keep increasing across the
-- counter's expiry). Standbys wait in the lock's wake-one queue (next_waiter in prelude.lua).
--
-- The change log is a list of the last LOG_LENGTH changes, oldest first, each
-- "<version>:<term>:<kind>:<value>": kind "L" a leader was elected (value: its value), "P" the
-- leader proclaimed a new value, "N" the term ended without a leader after it (resigned, or
-- found expired by the next campaign). Versions count up by one per entry, so an observer can
-- tell which entries it has seen. The log expires ARGV-given ms after its last change; an
-- observer that finds it gone (or shorter than what it saw) reads it from the start, and the
-- order of terms keeps its stream from going back.
local LOG_LENGTH = 16

-- The term and value of a leader key's payload "<term>:<value>".
local function parse_payload(payload)
    local colon = string.find(payload, ':', 1, true)
    if not colon then
        return nil, payload
    end
    return tonumber(string.sub(payload, 1, colon - 1)), string.sub(payload, colon + 1)
end

-- The version and kind of a log entry, nil for none.
local function parse_entry(entry)
    if not entry then
        return nil, nil
    end
    local version, term, kind = string.match(entry, '^(%d+):(%d+):(%a):')
    return tonumber(version), kind, tonumber(term)
end

-- Appends a change to the log at `key`, whose last entry is `last` (read before the first
-- write), keeps the last LOG_LENGTH entries and lets the log live `ttl_ms` more.
local function append_log(key, last, term, kind, value, ttl_ms)
    local version = (parse_entry(last) or 0) + 1
    redis.call('rpush', key, version .. ':' .. string.format('%d', term) .. ':' .. kind .. ':'
        .. value)
    redis.call('ltrim', key, -LOG_LENGTH, -1)
    redis.call('pexpire', key, string.format('%d', ttl_ms))
end

