--[[
Give one use of a shared code back: uses +1 and the shopper's count -1, once per use (SREM removes the
member once). Run when the use's coupon is released, or when its PostgreSQL write failed after the take.

KEYS[1] uses   string  uses left
KEYS[2] users  hash    user id -> uses this shopper holds
KEYS[3] takes  set     the uses holding a unit
KEYS[4] group  hash    only for a campaign of a group: user id -> coupons held of all its campaigns (-1 here too;
                       a missing one is left missing: the rebuild restores it)
ARGV[1] user id of the use
ARGV[2] the use's member

Returns 1 given back now, 0 not taken (given back before: nothing changed), -1 no state (nothing changed).
--]]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('SREM', KEYS[3], ARGV[2]) == 0 then
  return 0
end
redis.call('INCR', KEYS[1])
if tonumber(redis.call('HINCRBY', KEYS[2], ARGV[1], -1)) < 0 then
  redis.call('HSET', KEYS[2], ARGV[1], 0)
end
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 1 and tonumber(redis.call('HINCRBY', KEYS[4], ARGV[1], -1)) < 0 then
  redis.call('HSET', KEYS[4], ARGV[1], 0)
end
return 1
