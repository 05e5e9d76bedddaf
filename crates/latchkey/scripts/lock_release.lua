-- lock_release.fast.lua found latchkey clients queued: free the lock, then hand it over to the
-- earliest live one (hand_over), checking every command before the first write.
acl_check({'hdel', 'exists', 'zcard', 'hlen', 'get', 'zrange', 'hget', 'zrem', 'set', 'time'},
    ARGV[4], {KEYS[2]})
-- HDEL refuses a lock key of another type before anything is written. Fields of others left
-- in the hash (say a Java read hold under the same name) keep it held: nobody is handed it.
if redis.call('hdel', KEYS[1], ARGV[2]) == 0 then
    return -1
elseif redis.call('exists', KEYS[1]) == 1 then
    return 0
end
hand_over(ARGV[4], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[1])
return 0
