-- Extend the visibility timeout of a delivery that still holds its item.
-- ARGV: the item id, the delivery's attempt number, the new timeout in ms from now.
-- Returns 1 when extended, 0 when the delivery no longer holds the item (acknowledged,
-- released, or timed out and put back or claimed again).
acl_check({'hget', 'time', 'type', 'zadd', 'zscore'})
queue_keys('unacked', 'attempts')
if redis.call('hget', KEYS[2], ARGV[1]) ~= ARGV[2] or redis.call('zscore', KEYS[1], ARGV[1]) == false then
    return 0
end
-- Rounded up, so a deadline never comes before the full timeout has passed.
redis.call('zadd', KEYS[1], 'XX', now_ms(true) + tonumber(ARGV[3]), ARGV[1])
return 1
