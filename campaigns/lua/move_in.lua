--[[
Receive stock moved from another bucket (move_out.lua), once per move id: the second half of a move.

KEYS[1] meta      hash    share, moved (see move_out.lua)
KEYS[2] stock     string  coupons left in this bucket
KEYS[3] received  hash    every move received: move id -> units (kept, for verify_campaign)
ARGV[1] move id   ARGV[2] units

Returns 1 when received now, 0 when received before (nothing changed), -1 when this bucket has no state
(nothing changed: the move stays pending at its donor, in transit, until the rebuild gives this bucket its state).
--]]
if redis.call('EXISTS', KEYS[2]) == 0 then
  return -1
end
if redis.call('HSETNX', KEYS[3], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('INCRBY', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'share', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'moved', 1)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return 1
