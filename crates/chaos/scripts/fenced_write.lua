-- fenced_write.lua: a write to the fencing store, guarded by a fencing token.
--
-- KEYS[1]  hash of the protected resource, with fields `token` (largest
--          token accepted so far) and `value` (last accepted value)
-- ARGV[1]  fencing token of the writer: a decimal integer in 0..2^64-1
-- ARGV[2]  value to store
--
-- The write is accepted only if ARGV[1] >= the stored token (an equal token
-- is accepted: the same holder may write several times). An accepted write
-- stores the value and the token and returns 1; a stale write changes
-- nothing and returns 0. Bad arguments return an error.
--
-- Tokens are compared as digit strings, never as Lua numbers: Lua numbers
-- are doubles and would round tokens above 2^53.

local U64_MAX = '18446744073709551615'

-- Returns the canonical digit string of a token, or nil if it is not one.
local function canonical(token)
  if type(token) ~= 'string' or not string.match(token, '^%d+$') then
    return nil
  end
  local digits = string.gsub(token, '^0+', '')
  if digits == '' then
    digits = '0'
  end
  return digits
end

-- Whether canonical digit string a is greater than canonical digit string b.
local function greater(a, b)
  if #a ~= #b then
    return #a > #b
  end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return false
end

if #KEYS ~= 1 or #ARGV ~= 2 then
  return redis.error_reply('ERR fenced_write: expected 1 key and 2 arguments')
end

local token = canonical(ARGV[1])
if token == nil or greater(token, U64_MAX) then
  return redis.error_reply('ERR fenced_write: token must be an integer in 0..2^64-1')
end

local stored = redis.call('HGET', KEYS[1], 'token')
if stored then
  local current = canonical(stored)
  if current == nil then
    return redis.error_reply('ERR fenced_write: stored token is corrupt')
  end
  if greater(current, token) then
    return 0
  end
end

redis.call('HSET', KEYS[1], 'token', token, 'value', ARGV[2])
return 1
